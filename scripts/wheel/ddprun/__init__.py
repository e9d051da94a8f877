"""ddprun's wheel: the ddprun program is installed beside the interpreter (bin/ddprun);
`python -m ddprun ARGS` runs it."""
