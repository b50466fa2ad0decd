"""The command line: parsing, dispatch, exit codes and everything printed. The only layer that prints."""
