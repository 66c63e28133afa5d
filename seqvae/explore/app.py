"""The explorer's web page (Dash): the map, the selected molecule with its neighbours, the
interpolation strip, prior samples, the optimisation panel when the run has a property head, and
exports. Callbacks only read the page and call ``Explorer``; a ``SeqvaeError`` becomes a message
beside the input that caused it, never a server error.
"""

from __future__ import annotations

import csv
import io

from seqvae.errors import SeqvaeError
from seqvae.explore import molecules
from seqvae.explore.explorer import Explorer
from seqvae.explore.latent_map import COLOURS

# Sets that can be exported, with the columns written for each.
EXPORTS = {"neighbours": ("smiles", "valid", "similarity", "x", "y"),
           "interpolation": ("t", "smiles", "valid", "similarity", "x", "y"),
           "samples": ("smiles", "valid", "x", "y"),
           "optimisation": ("smiles", "valid", "similarity", "predicted", "x", "y"),
           "map": ("smiles", "x", "y")}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 0; color: #222; }
header { padding: 8px 16px; background: #1f3a5f; color: white; }
header h1 { font-size: 18px; margin: 0; display: inline; }
header span { margin-left: 12px; font-size: 13px; opacity: 0.85; }
.page { display: flex; gap: 12px; padding: 8px 12px; }
.map-column { flex: 3; min-width: 480px; }
.side-column { flex: 2; min-width: 420px; max-height: 92vh; overflow-y: auto; }
.controls { display: flex; gap: 16px; align-items: center; flex-wrap: wrap; font-size: 13px; }
.controls label { font-weight: 600; }
.grid { display: flex; flex-wrap: wrap; gap: 6px; }
.molecule-card { width: 128px; border: 1px solid #ccc; border-radius: 4px; padding: 3px;
                 font-size: 11px; text-align: center; background: #fff; }
.molecule-card img { width: 120px; height: 88px; }
.molecule-card.invalid { border: 2px solid #c0392b; background: #fdecea; }
.molecule-card.large { width: 240px; }
.molecule-card.large img { width: 232px; height: 170px; }
.molecule-card .smiles { font-family: monospace; word-break: break-all; }
.molecule-card .note, .molecule-card .label { color: #555; }
.molecule-card.invalid .note { color: #c0392b; font-weight: 600; }
.placeholder { width: 100%; height: 88px; display: flex; align-items: center;
               justify-content: center; color: #c0392b; font-weight: 600; }
.inline-error { color: #c0392b; font-size: 13px; margin: 4px 0; min-height: 1em; }
.row { display: flex; gap: 6px; align-items: center; margin: 4px 0; font-size: 13px; }
.row input[type=text] { flex: 1; font-family: monospace; padding: 3px; }
.section-title { font-weight: 600; margin: 8px 0 4px; font-size: 14px; }
.strip-title { font-size: 13px; color: #333; margin: 4px 0; }
button { font-size: 13px; padding: 3px 10px; cursor: pointer; }
"""

INDEX = """<!DOCTYPE html>
<html><head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>""" + STYLE + """</style>
</head><body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body></html>"""


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
    from dash import ALL, Input, Output, State, ctx, dcc, html

    app = dash.Dash(__name__, title="seqvae explore", update_title=None,
                    suppress_callback_exceptions=True)
    app.index_string = INDEX
    latent = explorer.map
    colours = list(COLOURS) + ([("predicted", f"{explorer.head.name} (predicted)")]
                               if explorer.head is not None else [])
    has_head = explorer.head is not None

    app.layout = html.Div([
        html.Header([html.H1("seqvae explore"), html.Span(
            f"{explorer.run.run_dir} · {len(latent)} molecules from {latent.source} · "
            f"latent {explorer.latent_dim} · {latent.projection.method.upper()}")]),
        html.Div(className="page", children=[
            html.Div(className="map-column", children=[
                html.Div(className="controls", children=[
                    html.Label("colour"),
                    dcc.Dropdown(id="colour", options=[{"label": label, "value": key}
                                                       for key, label in colours],
                                 value=colours[0][0], clearable=False, style={"width": "200px"}),
                    html.Label("decoding"),
                    dcc.RadioItems(id="decoding", value="greedy", inline=True, options=[
                        {"label": " greedy ", "value": "greedy"},
                        {"label": f" beam {explorer.beam_width}", "value": "beam"}]),
                    _export_buttons("map"),
                ]),
                dcc.Graph(id="map", figure=_figure(latent, colours[0][0], {}),
                          clear_on_unhover=True, style={"height": "82vh"},
                          config={"scrollZoom": True, "displaylogo": False}),
                dcc.Tooltip(id="map-tooltip", direction="right"),
            ]),
            html.Div(className="side-column", children=[
                dcc.Tabs(id="tabs", value="select", children=[
                    dcc.Tab(label="Selected", value="select", id="tab-select", children=_select_panel(html, dcc)),
                    dcc.Tab(label="Interpolate", value="interpolate", id="tab-interpolate",
                            children=_interpolate_panel(html, dcc)),
                    dcc.Tab(label="Sample", value="sample", id="tab-sample", children=_sample_panel(html, dcc)),
                ] + ([dcc.Tab(label="Optimise", value="optimise", id="tab-optimise",
                              children=_optimise_panel(html, dcc, explorer.head.name))]
                     if has_head else [])),
            ]),
        ]),
        dcc.Store(id="selection"), dcc.Store(id="interpolation"), dcc.Store(id="samples"),
        dcc.Store(id="optimisation"), dcc.Download(id="download"),
    ])

    @app.callback(Output("map", "figure"), Input("colour", "value"), Input("selection", "data"),
                  Input("interpolation", "data"), Input("samples", "data"),
                  Input("optimisation", "data"))
    def draw_map(colour, selection, interpolation, samples, optimisation):
        overlays = {"selection": selection, "interpolation": interpolation, "samples": samples,
                    "optimisation": optimisation}
        if ctx.triggered_id in (None, "colour"):
            return _figure(latent, colour, overlays)
        changed = {"selection": ("neighbours", "selected")}.get(ctx.triggered_id,
                                                               (ctx.triggered_id,))
        shown, patch = _overlay_traces(overlays), dash.Patch()
        for name in changed:
            patch["data"][1 + OVERLAYS.index(name)] = shown[name]
        return patch

    @app.callback(Output("map-tooltip", "show"), Output("map-tooltip", "bbox"),
                  Output("map-tooltip", "children"), Input("map", "hoverData"),
                  State("colour", "value"))
    def hover(hover_data, colour):
        point = _point(hover_data)
        if point is None:
            return False, dash.no_update, dash.no_update
        smiles, index = _point_molecule(latent, point)
        lines = [html.Div(smiles, className="smiles")]
        if index is not None and colour in latent.properties:
            value = float(latent.properties[colour][index])
            lines.append(html.Div(f"{dict(colours)[colour]}: {value:.3g}", className="note"))
        card = html.Div([_drawing(html, smiles, large=False)] + lines, className="molecule-card")
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
            point = _point(click)
            if point is None:
                return dash.no_update, "", dash.no_update, dash.no_update
            smiles, index = _point_molecule(latent, point)
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
            html.Div([_drawing(html, selection["smiles"], large=True),
                      html.Div(selection["smiles"], className="smiles"),
                      html.Div(described, className="note")],
                     className="molecule-card large", id="selected-card"),
            _card(html, recon, f"reconstruction ({selection['decoding']}): "
                  + ("exact" if same else "differs"), large=True, card_id="reconstruction-card"),
        ]), [_card(html, entry) for entry in selection["neighbours"]]

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
            _card(html, entry, f"t={entry['t']:.2f}") for entry in path]

    @app.callback(Output("samples", "data"), Output("sample-message", "children"),
                  Input("sample-button", "n_clicks"), State("temperature", "value"),
                  State("sample-count", "value"), prevent_initial_call=True)
    def sample(clicks, temperature, count):
        try:
            return explorer.sample(count or 12, temperature or 1.0, seed=clicks or 0), ""
        except SeqvaeError as error:
            return None, str(error)

    @app.callback(Output("sample-grid", "children"), Input("samples", "data"))
    def show_samples(result):
        if not result:
            return []
        valid = sum(entry["valid"] for entry in result["molecules"])
        return [html.Div(f"{valid}/{len(result['molecules'])} valid at temperature "
                         f"{result['temperature']:g}", className="note", style={"width": "100%"})
                ] + [_card(html, entry) for entry in result["molecules"]]

    if has_head:
        @app.callback(Output("optimisation", "data"), Output("optimise-message", "children"),
                      Input("optimise-button", "n_clicks"), State("selection", "data"),
                      State("optimise-steps", "value"), State("decoding", "value"),
                      prevent_initial_call=True)
        def optimise(_clicks, selection, steps, decoding):
            if not selection:
                return None, "select a molecule first (click the map or type a SMILES)"
            try:
                return explorer.optimise(selection["z"], steps or 20, beam=decoding == "beam",
                                         reference=selection["smiles"]), ""
            except SeqvaeError as error:
                return None, str(error)

        @app.callback(Output("trajectory", "children"), Input("optimisation", "data"))
        def show_optimisation(result):
            if not result:
                return []
            return [_card(html, entry, f"{result['name']} {entry['predicted']:.3g}")
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


# --- layout pieces ---------------------------------------------------------------------------


def _export_buttons(name: str):
    from dash import html

    return html.Span([html.Button(f"export .{fmt}", id={"export": name, "format": fmt},
                                  n_clicks=0, style={"marginLeft": "4px"})
                      for fmt in ("smi", "csv")])


def _select_panel(html, dcc):
    return [
        html.Div(className="row", children=[
            dcc.Input(id="select-input", type="text", placeholder="type a SMILES, press Enter",
                      debounce=True),
            html.Button("select", id="select-button")]),
        html.Div(id="select-message", className="inline-error"),
        dcc.Loading(html.Div(id="selected"), type="dot"),
        html.Div(className="row", children=[
            html.Label("radius"),
            html.Div(dcc.Slider(id="radius", min=0, max=3, step=0.05, value=0.5,
                                marks={v: str(v) for v in (0, 0.5, 1, 2, 3)},
                                tooltip={"placement": "bottom"}), style={"flex": 1}),
            html.Label("neighbours"),
            dcc.Input(id="neighbour-count", type="number", min=1, max=64, value=12,
                      style={"width": "50px"}),
            html.Button("resample", id="resample", n_clicks=0)]),
        html.Div(className="row", children=[
            html.Button("selected → A", id="to-a"), html.Button("selected → B", id="to-b"),
            _export_buttons("neighbours")]),
        html.Div("Neighbours: decoded from z + radius·ε", className="section-title"),
        html.Div(id="neighbours", className="grid"),
    ]


def _interpolate_panel(html, dcc):
    return [
        html.Div(className="row", children=[html.Label("A"), dcc.Input(
            id="interp-a", type="text", placeholder="SMILES of the start")]),
        html.Div(className="row", children=[html.Label("B"), dcc.Input(
            id="interp-b", type="text", placeholder="SMILES of the end")]),
        html.Div(className="row", children=[
            html.Label("steps"),
            html.Div(dcc.Slider(id="steps", min=2, max=30, step=1, value=8,
                                marks={v: str(v) for v in (2, 8, 16, 30)},
                                tooltip={"placement": "bottom"}), style={"flex": 1}),
            dcc.RadioItems(id="path-kind", value="linear", inline=True, options=[
                {"label": " linear ", "value": "linear"}, {"label": " slerp", "value": "slerp"}]),
            html.Button("interpolate", id="interp-button")]),
        html.Div(id="interp-message", className="inline-error"),
        html.Div(_export_buttons("interpolation"), className="row"),
        dcc.Loading(html.Div(id="strip", className="grid"), type="dot"),
    ]


def _sample_panel(html, dcc):
    return [
        html.Div(className="row", children=[
            html.Label("temperature"),
            html.Div(dcc.Slider(id="temperature", min=0.1, max=2.0, step=0.1, value=1.0,
                                marks={v: str(v) for v in (0.1, 0.5, 1, 1.5, 2)},
                                tooltip={"placement": "bottom"}), style={"flex": 1}),
            dcc.Input(id="sample-count", type="number", min=1, max=64, value=12,
                      style={"width": "50px"}),
            html.Button("sample", id="sample-button", n_clicks=0)]),
        html.Div(id="sample-message", className="inline-error"),
        html.Div(_export_buttons("samples"), className="row"),
        dcc.Loading(html.Div(id="sample-grid", className="grid"), type="dot"),
    ]


def _optimise_panel(html, dcc, name: str):
    return [
        html.Div(f"Follow the property head ({name}) from the selected molecule.",
                 className="note"),
        html.Div(className="row", children=[
            html.Label("steps"),
            dcc.Input(id="optimise-steps", type="number", min=1, max=100, value=20,
                      style={"width": "60px"}),
            html.Button("optimise", id="optimise-button", n_clicks=0)]),
        html.Div(id="optimise-message", className="inline-error"),
        html.Div(_export_buttons("optimisation"), className="row"),
        dcc.Loading(html.Div(id="trajectory", className="grid"), type="dot"),
    ]


def _drawing(html, smiles: str, large: bool):
    svg = molecules.molecule_svg(smiles, *((232, 170) if large else (120, 88)))
    if svg is None:
        return html.Div("no structure", className="placeholder")
    return html.Img(src=molecules.data_uri(svg), alt=smiles)


def _card(html, entry: dict, note: str = "", large: bool = False, card_id: str | None = None):
    """A molecule's drawing, SMILES, ``note`` and validity (with the similarity, when known)."""
    classes = "molecule-card" + (" large" if large else "") + ("" if entry["valid"] else " invalid")
    extra = {"id": card_id} if card_id else {}
    similarity = entry.get("similarity")
    validity = ("valid" + (f" · sim {similarity:.2f}" if similarity is not None else "")
                if entry["valid"] else "invalid")
    return html.Div([_drawing(html, entry["smiles"], large),
                     html.Div(entry["smiles"] or "(empty)", className="smiles")]
                    + ([html.Div(note, className="label")] if note else [])
                    + [html.Div(validity, className="note")],
                    className=classes, title=entry["smiles"], **extra)


# --- the map figure ----------------------------------------------------------------------------


def _point(event) -> dict | None:
    points = (event or {}).get("points") or []
    return points[0] if points else None


def _point_molecule(latent, point: dict) -> tuple[str, int | None]:
    """(SMILES, map index or None) of a hovered or clicked point of any trace."""
    data = point.get("customdata")
    if isinstance(data, list):
        data = data[0] if data else None
    if isinstance(data, (int, float)) and point.get("curveNumber", 0) == 0:
        return latent.smiles[int(data)], int(data)
    return str(data), None


# The map's traces after the molecules, always present (empty when nothing is shown), so that a
# change of one shown set patches its trace instead of sending every point again.
OVERLAYS = ("neighbours", "selected", "interpolation", "samples", "optimisation")


def _overlay_traces(overlays: dict) -> dict[str, dict]:
    """A Plotly trace per name of ``OVERLAYS`` from the page's stores (selection, ...)."""

    def trace(name, entries, symbol, colour, mode="markers", size=9):
        return {"type": "scatter", "mode": mode, "name": name, "showlegend": bool(entries),
                "x": [e["x"] for e in entries], "y": [e["y"] for e in entries],
                "customdata": [e["smiles"] for e in entries], "hoverinfo": "none",
                "marker": {"symbol": [symbol if e.get("valid", True) else "x-thin-open"
                                      for e in entries], "size": size, "color": colour,
                           "line": {"width": 1, "color": colour}},
                "line": {"color": colour, "width": 2}}

    selection = overlays.get("selection") or {}
    selected = [{"x": selection["x"], "y": selection["y"], "smiles": selection["smiles"]}
                ] if selection else []
    return {"neighbours": trace("neighbours", selection.get("neighbours", []), "circle-open",
                                "#e67e22"),
            "selected": trace("selected", selected, "star", "#c0392b", size=16),
            "interpolation": trace("interpolation", (overlays.get("interpolation") or {})
                                   .get("path", []), "circle", "#8e44ad", mode="lines+markers"),
            "samples": trace("samples", (overlays.get("samples") or {}).get("molecules", []),
                             "diamond", "#16a085"),
            "optimisation": trace("optimisation", (overlays.get("optimisation") or {})
                                  .get("path", []), "triangle-up", "#2980b9",
                                  mode="lines+markers")}


def _figure(latent, colour: str, overlays: dict) -> dict:
    """The map as a Plotly figure dict: every molecule (WebGL), then the ``OVERLAYS``."""
    values = latent.properties.get(colour)
    colour_list = [None if v != v else float(v) for v in values] if values is not None else None
    label = dict(COLOURS).get(colour, colour)
    points = {"type": "scattergl", "mode": "markers", "name": "molecules",
              "x": latent.coords[:, 0].tolist(), "y": latent.coords[:, 1].tolist(),
              "customdata": list(range(len(latent))), "hoverinfo": "none",
              "marker": {"size": 5, "opacity": 0.75, "color": colour_list,
                         "colorscale": "Viridis", "showscale": True,
                         "colorbar": {"title": {"text": label}, "thickness": 12}}}
    shown = _overlay_traces(overlays)
    titles = latent.projection.axis_titles()
    return {"data": [points] + [shown[name] for name in OVERLAYS], "layout": {
        "uirevision": "map", "dragmode": "pan", "hovermode": "closest",
        "margin": {"l": 50, "r": 10, "t": 10, "b": 40},
        "xaxis": {"title": {"text": titles[0]}, "zeroline": False},
        "yaxis": {"title": {"text": titles[1]}, "zeroline": False},
        "legend": {"orientation": "h", "y": 1.02, "x": 0}, "showlegend": True}}
