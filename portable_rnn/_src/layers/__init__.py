"""What the layer frameworks share without importing them: the recurrent layers' parameter tree
and call (`params`), and Flax's `attention_fn` (`flax_attention`)."""
