"""Running CEL: a syntax tree compiled to Python source, the program that holds it, and the names generated code calls."""
