"""The encoder families and their heads: modules only (no flags, no mesh, no file I/O)."""
