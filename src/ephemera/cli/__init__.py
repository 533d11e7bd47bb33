"""The `ephemera` command line: one subcommand per component (`apiserver`, and later the
scheduler, controllers and kubelet) and `up`, which runs a whole cluster by supervising one
child process per component."""
