"""One validator per config section: each reads its section, records problems, returns its frozen object."""
