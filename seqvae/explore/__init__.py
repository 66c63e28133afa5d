"""``seqvae explore``: a latent-space explorer for a trained run in the browser (Dash).

``projection`` (PCA, UMAP) and ``latent_map`` (the cached map) build the map; ``molecules``
draws and scores molecules; ``property_head`` finds the run's property head (``seqvae
fit-properties``); ``explorer`` asks the model (select, neighbours, interpolate, sample,
optimise); ``figure`` and ``layout`` are the page's parts, ``app`` its callbacks, and
``server`` starts it. Dash is an optional extra (``pip install 'seqvae[explore]'``),
imported only when the page is built.
"""
