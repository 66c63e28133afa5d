"""The explorer's map as a Plotly figure (plain dicts, no plotly import): every molecule in one
WebGL trace, then one trace per shown set, and which molecule a hovered or clicked point is."""

from __future__ import annotations

from seqvae.explore.latent_map import COLOURS, LatentMap

def event_point(event) -> dict | None:
    points = (event or {}).get("points") or []
    return points[0] if points else None


def point_molecule(latent: LatentMap, point: dict) -> tuple[str, int | None]:
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


def overlay_traces(overlays: dict) -> dict[str, dict]:
    """A Plotly trace per name of ``OVERLAYS`` from the page's stores (``selection``,
    ``interpolation``, ``samples``, ``optimisation``); invalid molecules drawn as crosses.

    WebGL traces like the map's own: Plotly draws every SVG trace under the WebGL canvas, where
    thousands of map points would hide them."""

    def trace(name, entries, symbol, colour, mode="markers", size=9):
        return {"type": "scattergl", "mode": mode, "name": name, "showlegend": bool(entries),
                "x": [e["x"] for e in entries], "y": [e["y"] for e in entries],
                "customdata": [e["smiles"] for e in entries], "hoverinfo": "none",
                "marker": {"symbol": [symbol if e.get("valid", True) else "x"
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


def map_figure(latent: LatentMap, colour: str, overlays: dict) -> dict:
    """The map as a Plotly figure dict: every molecule (WebGL), then the ``OVERLAYS``."""
    values = latent.properties.get(colour)
    colour_list = [None if v != v else float(v) for v in values] if values is not None else None
    label = dict(COLOURS).get(colour) or colour.replace("predicted:", "") + " (predicted)"
    points = {"type": "scattergl", "mode": "markers", "name": "molecules",
              "x": latent.coords[:, 0].tolist(), "y": latent.coords[:, 1].tolist(),
              "customdata": list(range(len(latent))), "hoverinfo": "none",
              "marker": {"size": 5, "opacity": 0.75, "color": colour_list,
                         "colorscale": "Viridis", "showscale": True,
                         "colorbar": {"title": {"text": label}, "thickness": 12}}}
    shown = overlay_traces(overlays)
    titles = latent.projection.axis_titles()
    return {"data": [points] + [shown[name] for name in OVERLAYS], "layout": {
        "uirevision": "map", "dragmode": "pan", "hovermode": "closest",
        "margin": {"l": 50, "r": 10, "t": 10, "b": 40},
        "xaxis": {"title": {"text": titles[0]}, "zeroline": False},
        "yaxis": {"title": {"text": titles[1]}, "zeroline": False},
        "legend": {"orientation": "h", "y": 1.02, "x": 0}, "showlegend": True}}
