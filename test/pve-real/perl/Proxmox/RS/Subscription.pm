package Proxmox::RS::Subscription;

# Stand-in for proxmox-perl-rs's Proxmox::RS::Subscription (Rust, not in any registry): a node
# without a subscription key, which is what pvestatd's node status pass reads (no
# /etc/subscription file: read_subscription answers undef). Any other function dies naming itself.

use strict;
use warnings;

sub get_hardware_address_candidates { return []; }

sub read_subscription { return undef; }

our $AUTOLOAD;

sub AUTOLOAD {
    my $n = $AUTOLOAD;
    return if $n =~ /::DESTROY$/;
    return undef if $PVETierStandIns::loading;
    die "$n is not available in the pve-real tier\n";
}

1;
