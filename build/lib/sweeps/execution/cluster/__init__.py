"""Starting or joining Ray: settings, loopback listeners, code shipped to the nodes."""
