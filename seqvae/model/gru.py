"""The GRU layer of seqvae's encoder and decoder, written for custom loops.

``scan`` is a ``tf.while_loop`` over ``tf.TensorArray`` s (differentiable, the same eagerly, in
``tf.function`` and under XLA); ``step`` is what the decoder's loops and the samplers call.

Shapes: ``B`` batch, ``T`` time steps, ``D`` input features, ``H`` units.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def matmul_last_axis(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """``(..., D) @ (D, K) -> (..., K)`` as one 2-D matmul.

    A batched ``tf.matmul`` of a 3-D tensor with a 2-D kernel broadcasts the kernel, and its
    weight gradient materialises one ``(D, K)`` product per example before summing them (1.6 GB
    and ~30% of a MOSES-sized step); flattening the leading axes keeps it one matmul each way.
    """
    if x.shape.rank == 2:
        return tf.matmul(x, kernel)
    leading = tf.shape(x)[:-1]
    flat = tf.matmul(tf.reshape(x, [-1, tf.shape(x)[-1]]), kernel)
    return tf.reshape(flat, tf.concat([leading, tf.shape(kernel)[-1:]], 0))


class GRU(keras.layers.Layer):
    """A GRU layer (the Keras/cuDNN ``reset_after`` formulation) built for custom loops.

    ``project`` computes the input part ``x @ W + b``, ``step`` advances one time step from it,
    and ``scan`` runs both over a sequence inside one ``tf.while_loop``. Projecting step by step
    instead of the whole sequence at once keeps the ``(T, B, 3H)`` projections and their
    gradients out of memory, and was faster too at MOSES size (``Decoder._known_inputs``).
    Integer inputs are treated as one-hot rows, so their projection is a row gather.

    Gates: ``u = σ(xu + h Uu + bu)``, ``r = σ(xr + h Ur + br)``,
    ``c = tanh(xc + r ⊙ (h Uc + bc))``, ``h' = u ⊙ h + (1 - u) ⊙ c``.
    """

    def __init__(self, units: int, input_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.input_dim = input_dim
        self.build()  # the shapes are known now: variables exist before the first call

    def build(self, input_shape=None):
        self.kernel = self.add_weight(name="kernel", shape=(self.input_dim, 3 * self.units),
                                      initializer="glorot_uniform")
        self.recurrent_kernel = self.add_weight(name="recurrent_kernel",
                                                shape=(self.units, 3 * self.units),
                                                initializer="orthogonal")
        self.bias = self.add_weight(name="bias", shape=(2, 3 * self.units), initializer="zeros")
        self.built = True

    def project(self, inputs: tf.Tensor, kernel_rows: tuple[int, int] | None = None) -> tf.Tensor:
        """Input projection ``(..., D) -> (..., 3H)`` incl. the input bias.

        Args:
          inputs: float ``(..., D)`` features, or int ``(...)`` ids (one-hot rows of the kernel).
          kernel_rows: use only kernel rows ``[a, b)`` (the part of the input these features fill).
        """
        kernel = self.kernel if kernel_rows is None else self.kernel[kernel_rows[0]:kernel_rows[1]]
        if inputs.dtype.is_integer:
            return tf.gather(kernel, inputs) + self.bias[0]
        return matmul_last_axis(inputs, tf.cast(kernel, inputs.dtype)) + tf.cast(self.bias[0], inputs.dtype)

    def step(self, x_proj: tf.Tensor, state: tf.Tensor) -> tf.Tensor:
        """One time step: ``x_proj (B, 3H)``, ``state (B, H)`` -> new state ``(B, H)``."""
        h_proj = tf.matmul(state, self.recurrent_kernel) + self.bias[1]
        x_u, x_r, x_c = tf.split(x_proj, 3, axis=-1)
        h_u, h_r, h_c = tf.split(h_proj, 3, axis=-1)
        update = tf.sigmoid(x_u + h_u)
        reset = tf.sigmoid(x_r + h_r)
        candidate = tf.tanh(x_c + reset * h_c)
        return update * state + (1.0 - update) * candidate

    def scan(self, inputs: tf.Tensor, initial_state: tf.Tensor, mask: tf.Tensor | None = None,
             time_major: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """Runs the layer over a sequence, projecting each step's input inside the loop.

        Args:
          inputs: float ``(B, T, D)`` features or int ``(B, T)`` ids (time-major if time_major).
          initial_state: ``(B, H)``.
          mask: optional bool ``(B, T)`` (``(T, B)`` if time_major); where False the state is
            carried unchanged.
          time_major: inputs and outputs are time-major; stacked layers stay time-major throughout.

        Returns:
          outputs ``(B, T, H)`` (``(T, B, H)`` if time_major) and the last state ``(B, H)``.
        """
        dtype = tf.as_dtype(self.compute_dtype)
        steps_major = inputs if time_major else tf.transpose(
            inputs, [1, 0] + list(range(2, inputs.shape.rank)))
        num_steps = tf.shape(steps_major)[0]
        inputs_ta = tf.TensorArray(steps_major.dtype, size=num_steps).unstack(steps_major)
        mask_ta = None
        if mask is not None:
            mask_ta = tf.TensorArray(tf.bool, size=num_steps).unstack(
                mask if time_major else tf.transpose(mask))
        outputs_ta = tf.TensorArray(dtype, size=num_steps)

        def body(t, state, outputs_ta):
            new_state = self.step(tf.cast(self.project(inputs_ta.read(t)), dtype), state)
            if mask_ta is not None:
                new_state = tf.where(mask_ta.read(t)[:, None], new_state, state)
            return t + 1, new_state, outputs_ta.write(t, new_state)

        _, last, outputs_ta = tf.while_loop(
            lambda t, *_: t < num_steps, body, (tf.constant(0), tf.cast(initial_state, dtype),
                                                outputs_ta),
            maximum_iterations=num_steps)
        outputs = outputs_ta.stack()
        return (outputs if time_major else tf.transpose(outputs, [1, 0, 2])), last

    def call(self, inputs, initial_state=None, step_mask=None, time_major=False):
        if initial_state is None:
            batch_size = tf.shape(inputs)[1 if time_major else 0]
            initial_state = tf.zeros([batch_size, self.units], self.compute_dtype)
        return self.scan(inputs, initial_state, step_mask, time_major)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "input_dim": self.input_dim}
