"""The explorer's web page (Dash): the map, the selected molecule with its neighbours, the
interpolation strip, prior samples (or samples that meet typed conditions and a scaffold), the
optimisation panel when the run has a property head, and exports. Callbacks only read the page
and call ``Explorer``; a ``SeqvaeError`` becomes a message beside the input that caused it,
never a server error.
"""

from __future__ import annotations

import csv
import io

from seqvae.errors import SeqvaeError
from seqvae.explore import molecules
from seqvae.explore.explorer import Explorer
from seqvae.explore.figure import OVERLAYS, event_point, map_figure, overlay_traces, point_molecule
from seqvae.explore.latent_map import COLOURS

# Sets that can be exported, with the columns written for each.
EXPORTS = {"neighbours": ("smiles", "valid", "similarity", "x", "y"),
           "interpolation": ("t", "smiles", "valid", "similarity", "x", "y"),
           "samples": ("smiles", "valid", "x", "y"),
           "optimisation": ("step", "smiles", "valid", "similarity", "predicted", "value", "x",
                            "y"),
           "map": ("smiles", "x", "y")}


def require_dash():
    """The ``dash`` module, or a one-line error saying how to install it."""
    try:
        import dash
    except ImportError:
        raise SeqvaeError("seqvae explore needs Dash: pip install 'seqvae[explore]'") from None
    return dash


def build_app(explorer: Explorer):
    """The Dash app of an ``Explorer`` (not yet serving)."""
    dash = require_dash()
    from dash import ALL, Input, Output, State, ctx, html

    from seqvae.explore import layout

    app = dash.Dash(__name__, title="seqvae explore", update_title=None,
                    suppress_callback_exceptions=True)
    app.index_string = layout.INDEX
    latent = explorer.map
    colours = list(COLOURS) + [(f"predicted:{name}", f"{name} (predicted)")
                               for name in (explorer.head.names if explorer.head else ())]
    has_head = explorer.head is not None
    app.layout = layout.page(explorer, colours)

    @app.callback(Output("map", "figure"), Input("colour", "value"), Input("selection", "data"),
                  Input("interpolation", "data"), Input("samples", "data"),
                  Input("optimisation", "data"))
    def draw_map(colour, selection, interpolation, samples, optimisation):
        overlays = {"selection": selection, "interpolation": interpolation, "samples": samples,
                    "optimisation": optimisation}
        if ctx.triggered_id in (None, "colour"):
            return map_figure(latent, colour, overlays)
        changed = {"selection": ("neighbours", "selected")}.get(ctx.triggered_id,
                                                               (ctx.triggered_id,))
        shown, patch = overlay_traces(overlays), dash.Patch()
        for name in changed:
            patch["data"][1 + OVERLAYS.index(name)] = shown[name]
        return patch

    @app.callback(Output("map-tooltip", "show"), Output("map-tooltip", "bbox"),
                  Output("map-tooltip", "children"), Input("map", "hoverData"),
                  State("colour", "value"))
    def hover(hover_data, colour):
        point = event_point(hover_data)
        if point is None:
            return False, dash.no_update, dash.no_update
        smiles, index = point_molecule(latent, point)
        lines = [html.Div(smiles, className="smiles")]
        if index is not None and colour in latent.properties:
            value = float(latent.properties[colour][index])
            lines.append(html.Div(f"{dict(colours)[colour]}: {value:.3g}", className="note"))
        card = html.Div([layout.drawing(smiles, large=False)] + lines, className="molecule-card")
        return True, point.get("bbox"), card

    @app.callback(Output("selection", "data"), Output("select-message", "children"),
                  Output("tabs", "value"), Output("select-input", "value"),
                  Input("map", "clickData"), Input("select-button", "n_clicks"),
                  Input("select-input", "n_submit"), Input("radius", "value"),
                  Input("neighbour-count", "value"), Input("decoding", "value"),
                  Input("resample", "n_clicks"),
                  State("select-input", "value"), State("selection", "data"),
                  prevent_initial_call=True)
    def select(click, _button, _submit, radius, count, decoding, resample, typed, current):
        trigger = ctx.triggered_id
        index, smiles = None, None
        if trigger == "map":
            point = event_point(click)
            if point is None:
                return dash.no_update, "", dash.no_update, dash.no_update
            smiles, index = point_molecule(latent, point)
        elif trigger in ("select-button", "select-input"):
            smiles = typed
        elif current:
            index, smiles = current["index"], current["smiles"]
        else:
            return dash.no_update, "", dash.no_update, dash.no_update
        try:
            result = explorer.select(index=index, smiles=None if index is not None else smiles,
                                     radius=radius or 0.0, count=count or 12,
                                     beam=decoding == "beam", seed=resample or 0)
        except SeqvaeError as error:
            return dash.no_update, str(error), dash.no_update, dash.no_update
        return result, "", "select", result["smiles"]

    @app.callback(Output("selected", "children"), Output("neighbours", "children"),
                  Input("selection", "data"))
    def show_selection(selection):
        if not selection:
            return html.Div("Click a point on the map, or type a SMILES.", className="note"), []
        values = selection["properties"]
        described = ", ".join(f"{label} {values[key]:.3g}" for key, label in colours
                              if values.get(key) is not None)
        recon = selection["reconstruction"]
        same = recon["valid"] and molecules.canonical(recon["smiles"]) == \
            molecules.canonical(selection["smiles"])
        return html.Div(className="grid", children=[
            html.Div([layout.drawing(selection["smiles"], large=True),
                      html.Div(selection["smiles"], className="smiles"),
                      html.Div(described, className="note")],
                     className="molecule-card large", id="selected-card"),
            layout.card(recon, f"reconstruction ({selection['decoding']}): "
                  + ("exact" if same else "differs"), large=True, card_id="reconstruction-card"),
        ]), [layout.card(entry) for entry in selection["neighbours"]]

    @app.callback(Output("interp-a", "value"), Output("interp-b", "value"),
                  Output("tabs", "value", allow_duplicate=True),
                  Input("to-a", "n_clicks"), Input("to-b", "n_clicks"), State("selection", "data"),
                  prevent_initial_call=True)
    def pick(_a, _b, selection):
        if not selection:
            return dash.no_update, dash.no_update, dash.no_update
        if ctx.triggered_id == "to-a":
            return selection["smiles"], dash.no_update, dash.no_update
        return dash.no_update, selection["smiles"], "interpolate"

    @app.callback(Output("interpolation", "data"), Output("interp-message", "children"),
                  Input("interp-button", "n_clicks"), State("interp-a", "value"),
                  State("interp-b", "value"), State("steps", "value"), State("path-kind", "value"),
                  State("decoding", "value"), prevent_initial_call=True)
    def interpolate(_clicks, start, end, steps, kind, decoding):
        try:
            return explorer.interpolate(start or "", end or "", steps=steps or 8,
                                        slerp=kind == "slerp", beam=decoding == "beam"), ""
        except SeqvaeError as error:
            return None, str(error)

    @app.callback(Output("strip", "children"), Input("interpolation", "data"))
    def show_interpolation(result):
        if not result:
            return []
        path = result["path"]
        inner = path[1:-1]
        title = (f"{result['start']} → {result['end']} ({'slerp' if result['slerp'] else 'linear'}"
                 f", {result['decoding']}): {sum(e['valid'] for e in inner)}/{len(inner)} "
                 f"intermediate steps valid")
        return [html.Div(title, className="note strip-title", style={"width": "100%"})] + [
            layout.card(entry, f"t={entry['t']:.2f}") for entry in path]

    @app.callback(Output("samples", "data"), Output("sample-message", "children"),
                  Input("sample-button", "n_clicks"), State("temperature", "value"),
                  State("sample-count", "value"), State("sample-where", "value"),
                  State("sample-scaffold", "value"), prevent_initial_call=True)
    def sample(clicks, temperature, count, where, scaffold):
        try:
            if (where or "").strip() or (scaffold or "").strip():
                return explorer.sample_where(count or 12, where or "", scaffold or "",
                                             temperature or 1.0, seed=clicks or 0), ""
            return explorer.sample(count or 12, temperature or 1.0, seed=clicks or 0), ""
        except SeqvaeError as error:
            return None, str(error)

    @app.callback(Output("sample-grid", "children"), Input("samples", "data"))
    def show_samples(result):
        if not result:
            return []
        valid = sum(entry["valid"] for entry in result["molecules"])
        title = result.get("summary") or (f"{valid}/{len(result['molecules'])} valid at "
                                          f"temperature {result['temperature']:g} "
                                          f"({result['sampler']})")
        return [html.Div(title, className="note", style={"width": "100%"})] + [
            layout.card(entry, layout.values_note(entry.get("values")))
            for entry in result["molecules"]]

    if has_head:
        @app.callback(Output("optimisation", "data"), Output("optimise-message", "children"),
                      Input("optimise-button", "n_clicks"), State("selection", "data"),
                      State("objective", "value"), State("direction", "value"),
                      State("optimise-steps", "value"), State("decoding", "value"),
                      prevent_initial_call=True)
        def optimise(_clicks, selection, objective, direction, steps, decoding):
            if not selection:
                return None, "select a molecule first (click the map or type a SMILES)"
            try:
                return explorer.optimise(selection["z"], objective, steps or 20,
                                         minimize=direction == "lower", beam=decoding == "beam",
                                         reference=selection["smiles"]), ""
            except SeqvaeError as error:
                return None, str(error)

        @app.callback(Output("trajectory", "children"), Input("optimisation", "data"))
        def show_optimisation(result):
            if not result:
                return []
            return [layout.optimisation_title(result)] + [
                layout.card(entry, layout.optimisation_note(result["name"], entry))
                for entry in result["path"]]

    @app.callback(Output("download", "data"),
                  Input({"export": ALL, "format": ALL}, "n_clicks"),
                  State("selection", "data"), State("interpolation", "data"),
                  State("samples", "data"), State("optimisation", "data"),
                  prevent_initial_call=True)
    def export(clicks, selection, interpolation, samples, optimisation):
        trigger = ctx.triggered_id
        if not trigger or not any(clicks):
            return dash.no_update
        name, fmt = trigger["export"], trigger["format"]
        rows = {"neighbours": (selection or {}).get("neighbours"),
                "interpolation": (interpolation or {}).get("path"),
                "samples": (samples or {}).get("molecules"),
                "optimisation": (optimisation or {}).get("path"),
                "map": [{"smiles": s, "x": float(x), "y": float(y)}
                        for s, (x, y) in zip(latent.smiles, latent.coords)]}[name]
        if not rows:
            return dash.no_update
        return dict(content=export_text(rows, EXPORTS[name], fmt), filename=f"{name}.{fmt}")

    return app


def export_text(rows: list[dict], columns: tuple[str, ...], fmt: str) -> str:
    """A shown set as ``.smi`` (one SMILES a line) or ``.csv`` (``columns``, header first)."""
    if fmt == "smi":
        return "".join(f"{row['smiles']}\n" for row in rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
    return out.getvalue()
