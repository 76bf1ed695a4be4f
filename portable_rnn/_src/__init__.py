"""portable_rnn's implementation, in layers that import only downwards (docs/development.md,
"Architecture"): `core` <- `attention`, `recurrent` <- `layers` <- the public modules <- `tools`."""
