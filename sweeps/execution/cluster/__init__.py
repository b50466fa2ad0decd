"""Starting or joining Ray: settings, loopback listeners, a remote cluster's resources, code shipped to the nodes."""
