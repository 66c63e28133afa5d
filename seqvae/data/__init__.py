"""Data: where sequences come from and how texts become token ids (no model, no TensorFlow
training code here; ``batching``, ``streaming`` and ``graph_tokenizers`` build ``tf.data`` and
``tf.strings`` pipelines)."""
