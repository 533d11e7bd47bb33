"""The Service proxy, as upstream's kube-proxy in nftables mode: `rules` turns Services and
EndpointSlices into one nftables table (pure), `nft` applies it through `nft -j -f -`
(full and partial transactions, deletion), `proxier` keeps it in step with the API through
informers. `ephemera proxy` (`ephemera.cli.proxy`) runs it; `ephemera up` runs one for its
node."""
