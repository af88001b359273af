package PVETierStandIns;

# The pve-real tier's stand-in for the Proxmox packages that are not vendored (pve-container,
# pve-firewall, pve-ha-manager, pve-network, librados2-perl, libpve-apiclient-perl, …) and the
# Rust modules (proxmox-perl-rs: PVE::RS::*, Proxmox::RS::*): a module of those namespaces that is
# found nowhere else on the include path (this hook is last on it) loads as
# an empty package, so the real PVE::API2 tree loads around them. Calling into one once the server
# runs dies with the missing module's name, which a test would see as a 500 naming it. Each stand-in used is logged
# once on stderr.

use strict;
use warnings;

# While the API tree loads, a stand-in's functions answer undef (modules register plugins and
# formats at load time); once the server runs (loaded() called), calling one dies.
our $loading = 1;
sub loaded { $loading = 0; }

# Only modules of Proxmox's own namespaces: a missing CPAN module stays an error (a Debian package
# to add to scripts/lib/pve-real.sh).
my $missing = qr{^(?:PVE|Proxmox)/};

# pve-manager's API subtrees that need a package not vendored at load time (ACME: proxmox-acme).
# They load as empty handlers, so the paths under them answer 501 instead of the tree not loading.
our @SKIPPED = qw(PVE::API2::ACMEAccount PVE::API2::ACMEPlugin);
for my $pkg (@SKIPPED) {
    (my $file = "$pkg.pm") =~ s{::}{/}g;
    $INC{$file} = __FILE__;
    eval "package $pkg; use base 'PVE::RESTHandler'; 1" or die $@;
}

push @INC, sub {
    my (undef, $file) = @_;
    return if $file !~ $missing || $file !~ /\.pm$/;
    (my $pkg = $file) =~ s{/}{::}g;
    $pkg =~ s/\.pm$//;
    print STDERR "pve-real stand-in: empty $pkg\n" if $ENV{PVE_REAL_DEBUG};
    my $src = "package $pkg; use strict; use warnings; use base 'PVE::RESTHandler';"
        . " our \$AUTOLOAD; sub AUTOLOAD { my \$n = \$AUTOLOAD; return if \$n =~ /::DESTROY\$/;"
        . " return undef if \$PVETierStandIns::loading;"
        . " die \"\$n is not available in the pve-real tier\\n\"; } 1;\n";
    open(my $fh, '<', \$src) or die;
    return $fh;
};

1;
