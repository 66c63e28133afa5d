"""The explorer's page: its style, layout, panels and molecule cards (Dash components).

Imported by ``seqvae.explore.app.build_app`` once Dash is known to be installed.
"""

from __future__ import annotations

from dash import dcc, html

from seqvae.explore import molecules
from seqvae.explore.figure import map_figure
from seqvae.explore.property_head import default_objective

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
.panel-note { font-size: 13px; color: #555; margin: 6px 0; }
button { font-size: 13px; padding: 3px 10px; cursor: pointer; }
"""

INDEX = """<!DOCTYPE html>
<html><head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>""" + STYLE + """</style>
</head><body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body></html>"""


def page(explorer, colours: list[tuple[str, str]]):
    """The whole page of an ``Explorer``; ``colours``: the map's (key, label) choices."""
    latent = explorer.map
    has_head = explorer.head is not None
    return html.Div([
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
                    export_buttons("map"),
                ]),
                dcc.Graph(id="map", figure=map_figure(latent, colours[0][0], {}),
                          clear_on_unhover=True, style={"height": "82vh"},
                          config={"scrollZoom": True, "displaylogo": False}),
                dcc.Tooltip(id="map-tooltip", direction="right"),
            ]),
            html.Div(className="side-column", children=[
                dcc.Tabs(id="tabs", value="select", children=[
                    dcc.Tab(label="Selected", value="select", id="tab-select", children=_select_panel()),
                    dcc.Tab(label="Interpolate", value="interpolate", id="tab-interpolate",
                            children=_interpolate_panel()),
                    dcc.Tab(label="Sample", value="sample", id="tab-sample", children=_sample_panel()),
                ] + ([dcc.Tab(label="Optimise", value="optimise", id="tab-optimise",
                              children=_optimise_panel(explorer.head.names))]
                     if has_head else [])),
            ]),
        ]),
        dcc.Store(id="selection"), dcc.Store(id="interpolation"), dcc.Store(id="samples"),
        dcc.Store(id="optimisation"), dcc.Download(id="download"),
    ])


def export_buttons(name: str):
    return html.Span([html.Button(f"export .{fmt}", id={"export": name, "format": fmt},
                                  n_clicks=0, style={"marginLeft": "4px"})
                      for fmt in ("smi", "csv")])


def _select_panel():
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
            export_buttons("neighbours")]),
        html.Div("Neighbours: decoded from z + radius·ε", className="section-title"),
        html.Div(id="neighbours", className="grid"),
    ]


def _interpolate_panel():
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
        *_results("interp-message", "interpolation", "strip"),
    ]


def _results(message_id: str, export_name: str, grid_id: str):
    """A panel's inline message, its export buttons and the grid of molecules it shows."""
    return [
        html.Div(id=message_id, className="inline-error"),
        html.Div(export_buttons(export_name), className="row"),
        dcc.Loading(html.Div(id=grid_id, className="grid"), type="dot"),
    ]


def _sample_panel():
    return [
        html.Div(className="row", children=[
            html.Label("temperature"),
            html.Div(dcc.Slider(id="temperature", min=0.1, max=2.0, step=0.1, value=1.0,
                                marks={v: str(v) for v in (0.1, 0.5, 1, 1.5, 2)},
                                tooltip={"placement": "bottom"}), style={"flex": 1}),
            dcc.Input(id="sample-count", type="number", min=1, max=64, value=12,
                      style={"width": "50px"}),
            html.Button("sample", id="sample-button", n_clicks=0)]),
        html.Div(className="row", children=[
            html.Label("where"),
            dcc.Input(id="sample-where", type="text",
                      placeholder="logp=2.5±0.5, qed>=0.7 (RDKit checks each molecule)"),
            html.Label("scaffold"),
            dcc.Input(id="sample-scaffold", type="text",
                      placeholder="SMILES or SMARTS")]),
        *_results("sample-message", "samples", "sample-grid"),
    ]


def _optimise_panel(names):
    return [
        html.Div("Follow the property head's prediction from the selected molecule (normalised "
                 "gradient steps of 0.25, at most 2 from the start); each step decoded, and "
                 "scored by RDKit where it computes the property.", className="panel-note"),
        html.Div(className="row", children=[
            html.Label("property"),
            dcc.Dropdown(id="objective", options=[{"label": n, "value": n} for n in names],
                         value=default_objective(names), clearable=False,
                         style={"width": "140px"}),
            dcc.RadioItems(id="direction", value="higher", inline=True, options=[
                {"label": " higher ", "value": "higher"}, {"label": " lower", "value": "lower"}]),
            html.Label("steps"),
            dcc.Input(id="optimise-steps", type="number", min=1, max=100, value=20,
                      style={"width": "60px"}),
            html.Button("optimise", id="optimise-button", n_clicks=0)]),
        *_results("optimise-message", "optimisation", "trajectory"),
    ]


def optimisation_title(result: dict):
    """The trajectory's first line: the property, the direction and how far it got."""
    path = result["path"]
    scored = [e["value"] for e in path[1:] if e["value"] is not None]
    best = (min(scored) if result["minimize"] else max(scored)) if scored else None
    start = path[0]["value"]
    text = (f"{result['name']} {'down' if result['minimize'] else 'up'}, {len(path) - 1} steps: "
            f"predicted {path[0]['predicted']:.3g} → {path[-1]['predicted']:.3g}")
    if best is not None:
        text += (f"; RDKit: start {'—' if start is None else f'{start:.3g}'}, best decoded "
                 f"{best:.3g}")
    return html.Div(text, className="note strip-title", style={"width": "100%"})


def optimisation_note(name: str, entry: dict) -> str:
    value = entry.get("value")
    return (f"step {entry['step']}: {name} " + ("—" if value is None else f"{value:.3g}")
            + f" (pred {entry['predicted']:.3g})")


def values_note(values: dict | None) -> str:
    """A conditioned sample's checked values: ``logp 2.71 · qed 0.78`` ("" without any)."""
    return " · ".join(f"{name} {value:.3g}" for name, value in (values or {}).items())


def drawing(smiles: str, large: bool):
    svg = molecules.molecule_svg(smiles, *((232, 170) if large else (120, 88)))
    if svg is None:
        return html.Div("no structure", className="placeholder")
    return html.Img(src=molecules.data_uri(svg), alt=smiles)


def card(entry: dict, note: str = "", large: bool = False, card_id: str | None = None):
    """A molecule's drawing, SMILES, ``note`` and validity (with the similarity, when known)."""
    classes = "molecule-card" + (" large" if large else "") + ("" if entry["valid"] else " invalid")
    extra = {"id": card_id} if card_id else {}
    similarity = entry.get("similarity")
    validity = ("valid" + (f" · sim {similarity:.2f}" if similarity is not None else "")
                if entry["valid"] else "invalid")
    return html.Div([drawing(entry["smiles"], large),
                     html.Div(entry["smiles"] or "(empty)", className="smiles")]
                    + ([html.Div(note, className="label")] if note else [])
                    + [html.Div(validity, className="note")],
                    className=classes, title=entry["smiles"], **extra)
