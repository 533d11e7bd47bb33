"""Pod semantics shared by every component: validation, defaulting, resource helpers, the
/dynamic rules; pure, no I/O."""
