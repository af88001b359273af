package PVE::Firewall;

# pve-firewall is not vendored. qemu-server's clone and destroy copy or remove a VM's
# /etc/pve/firewall/<vmid>.fw (clone_vmfw_conf, remove_vmfw_conf); no VM of the tier has one, so
# both do what pve-firewall does then: nothing. Everything else of the package dies like the other
# stand-ins (PVETierStandIns.pm) once the server runs.

use strict;
use warnings;
use base 'PVE::RESTHandler';

sub clone_vmfw_conf { return; }
sub remove_vmfw_conf { return; }

our $AUTOLOAD;
sub AUTOLOAD {
    my $n = $AUTOLOAD;
    return if $n =~ /::DESTROY$/;
    return undef if $PVETierStandIns::loading;
    die "$n is not available in the pve-real tier\n";
}

1;
