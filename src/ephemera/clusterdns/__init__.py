"""The cluster DNS server (`ephemera dns`): the cluster domain's records from Services and
EndpointSlices (records), served over UDP and TCP with an optional upstream resolver
(server)."""
