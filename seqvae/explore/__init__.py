"""``seqvae explore``: a latent-space explorer for a trained run in the browser (Dash).

``projection`` (PCA, UMAP) and ``latent_map`` (the cached map) build the map; ``molecules``
draws and scores molecules; ``explorer`` asks the model (select, neighbours, interpolate,
sample, optimise); ``property_head`` is the hook for a run's property head; ``app`` is the page
and ``server`` starts it. Dash is an optional extra (``pip install 'seqvae[explore]'``),
imported only when the page is built.
"""
