"""The JSON Schemas of kpe's formats (data files; a package only so that installs carry them)."""
