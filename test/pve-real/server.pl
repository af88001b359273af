#!/usr/bin/perl
# Serves Proxmox VE 9's own API code over HTTPS the way pvedaemon does (PVE::HTTPServer, a
# PVE::APIServer::AnyEvent, with the real PVE::API2 tree, token auth and permission checks) on
# 127.0.0.1:<port>, with the TLS setup of pveproxy. One process plays both daemons: pveproxy would
# forward the `protected` calls to pvedaemon, which then runs exactly this. Runs inside the tier's
# mount namespace (test/pve-real/ns.sh); prints `listening <port>` once it accepts connections.

use strict;
use warnings;

use IO::Socket::IP;
use IO::File;
use PVETierStandIns;
use PVE::INotify;
use PVE::Cluster;
use PVE::API2;
use PVE::APIServer::Formatter::Standard;
use PVE::HTTPServer;
use PVE::Service::pvestatd;

# pvedaemon's server, logging each API call (method, path, parameter names, status) to
# PVE_REAL_REQUEST_LOG, so the tests can count which of the driver's requests ran through the
# real handlers.
package PVETierHTTPServer {
    use base 'PVE::HTTPServer';

    sub rest_handler {
        my ($self, $clientip, $method, $rel_uri, $auth, $params) = @_;
        my $res = $self->SUPER::rest_handler($clientip, $method, $rel_uri, $auth, $params);
        if (my $f = $ENV{PVE_REAL_REQUEST_LOG}) {
            if (open(my $fh, '>>', $f)) {
                print $fh join("\t", $method, $rel_uri, join(',', sort keys %$params), $res->{status} // 200)
                    . "\n";
                close($fh);
            }
        }
        return $res;
    }
}

my ($port, $cert, $key) = @ARGV;
PVETierStandIns::loaded();

my $socket = IO::Socket::IP->new(
    LocalHost => '127.0.0.1',
    LocalPort => $port // 0,
    Listen => 64,
    ReuseAddr => 1,
    Proto => 'tcp',
) or die "listen: $@\n";

my $lockfile = '/run/pve-real-accept.lck';
my $lockfh = IO::File->new(">>$lockfile") or die "$lockfile: $!\n";

my $server = PVETierHTTPServer->new(
    keep_alive => 100,
    max_conn => 500,
    max_requests => 100000,
    lockfile => $lockfile,
    socket => $socket,
    lockfh => $lockfh,
    trusted_env => 1,
    ssl => { cert_file => $cert, key_file => $key },
    debug => $ENV{PVE_REAL_DEBUG} ? 1 : 0,
);

# pvestatd's own status pass (node, VMs, storages into pmxcfs's RRD rows, which
# /cluster/resources reads) every second instead of every ten, so a new VM's name and a storage's
# state show without a ten-second wait.
# The server says it listens only after the first pass: on a real node pvestatd has long run.
my $parent = $$;
pipe(my $ready_r, my $ready_w) or die "pipe: $!\n";
my $statd = fork() // die "fork: $!\n";
if ($statd == 0) {
    $0 = 'pve-real pvestatd';
    close($ready_r);
    while (getppid() == $parent) {
        PVE::Cluster::cfs_update();
        eval { PVE::Service::pvestatd::update_status() };
        warn $@ if $@ && $ENV{PVE_REAL_DEBUG};
        if ($ready_w) {
            print $ready_w "ready\n";
            close($ready_w);
            undef $ready_w;
        }
        sleep(1);
    }
    exit(0);
}
close($ready_w);
<$ready_r>;
close($ready_r);
$SIG{TERM} = sub { kill('TERM', $statd); exit(0) };
$0 = 'pve-real pvedaemon';

$| = 1;
print "listening " . $socket->sockport() . "\n";
$server->run();
