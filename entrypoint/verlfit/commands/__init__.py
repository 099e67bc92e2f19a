"""The command layer: one module per ``verlfit`` subcommand (its parser, its options turned into typed values, the
domain called, the result printed). Nothing outside this package imports it, and no command imports another."""
