"""Training: the objective and schedules (pure functions), the loop of a step and its hooks,
its inputs, ``tf.distribute`` and the gradient doctor. Importing the package loads none of
them: ``seqvae.training.loop.train`` trains; ``seqvae.workflows.train`` also keeps the prior
and exports."""
