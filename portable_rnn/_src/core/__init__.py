"""What every op shares: JAX internals (`compat`), the machine (`capabilities`), argument
`checks`, `sharding` and `batching` helpers, and the dispatcher (`dispatch`)."""
