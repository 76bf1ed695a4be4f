"""The recurrent family: the cell protocol and `Family` (`cell`), the flat weight `layout`, the
scan driver (`scan`), the shared op (`api`), the converters, and one folder per cell (`lstm`,
`gru`, `simple_rnn`), registered in `families` and `ops`."""
