package PVE::HA::Config;

# Stand-in for pve-ha-manager's PVE::HA::Config (not vendored): a node without HA, which is what
# the two reads /cluster/resources makes return when /etc/pve/ha holds nothing (an empty manager
# status, no resources). Any other function dies naming itself.

use strict;
use warnings;

sub read_manager_status { return {}; }

sub read_resources_config { return { ids => {}, order => {} }; }

sub vm_is_ha_managed { return 0; }

our $AUTOLOAD;

sub AUTOLOAD {
    my $n = $AUTOLOAD;
    return if $n =~ /::DESTROY$/;
    return undef if $PVETierStandIns::loading;
    die "$n is not available in the pve-real tier\n";
}

1;
