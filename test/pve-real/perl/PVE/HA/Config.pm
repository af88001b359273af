package PVE::HA::Config;

# Stand-in for pve-ha-manager's PVE::HA::Config (not vendored): a node without HA, which is what
# these reads return when /etc/pve/ha holds nothing (an empty manager status, no resources, no
# guest HA-managed): /cluster/resources reads the first two, qemu-server's create, destroy,
# migrate and start ask the others. Any other function dies naming itself.

use strict;
use warnings;

sub read_manager_status { return {}; }

sub read_resources_config { return { ids => {}, order => {} }; }

sub vm_is_ha_managed { return 0; }

sub service_is_configured { return 0; }

sub get_service_status { return {}; }

our $AUTOLOAD;

sub AUTOLOAD {
    my $n = $AUTOLOAD;
    return if $n =~ /::DESTROY$/;
    return undef if $PVETierStandIns::loading;
    die "$n is not available in the pve-real tier\n";
}

1;
