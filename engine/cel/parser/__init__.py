"""The CEL language: tokens, the syntax tree, and the parser that builds it with macros expanded."""
