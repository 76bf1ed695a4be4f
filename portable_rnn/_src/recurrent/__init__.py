"""The recurrent ops: the cell protocol and `Family` (`cell`), the flat weight `layout`, the
`lax.scan` driver (`driver`), the shared op (`api`), the converters, one folder per cell
(registered in `families`) and one module per route (`routes`, registered in `routes.ROUTES`)."""
