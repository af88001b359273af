package PVE::IPCC;

# Stand-in for pve-cluster's PVE::IPCC (C/XS, a client of pmxcfs's IPC socket). The pve-real tier
# has no pmxcfs: /etc/pve is a plain directory (bound over /etc/pve in a private mount
# namespace), so each request pmxcfs would answer from its in-memory copy of that tree is answered
# here from the directory itself, in pmxcfs's reply formats (pve-cluster src/pmxcfs/server.c,
# status.c). The status key/values pmxcfs keeps in memory (pvestatd's RRD rows, node kv) are files
# under /run/pve-real-status, one per key, shared by the server, its workers and the status loop;
# the RRD dump is their latest rows (no rrdcached history). The cluster log is kept nowhere.

use strict;
use warnings;

use Errno qw(ENOENT EINVAL);
use JSON;
use Time::HiRes ();

our $VERSION = '1.0';

my $base = '/etc/pve';
my $status_dir = '/run/pve-real-status';
my $start = time();
my $counter = 0;

sub _nodename {
    my $n = `hostname`;
    chomp $n;
    $n =~ s/\..*$//;
    return $n;
}

sub _status_file {
    my ($name) = @_;
    $name =~ s!/!%2F!g;
    return "$status_dir/$name";
}

sub _slurp {
    my ($f) = @_;
    open(my $fh, '<', $f) or return undef;
    local $/;
    my $data = <$fh>;
    close($fh);
    return $data;
}

sub _read {
    my ($path) = @_;
    open(my $fh, '<', "$base/$path") or return undef;
    local $/;
    my $data = <$fh>;
    close($fh);
    return $data // '';
}

# vmid => { node, type, path } for every guest config under nodes/*/{qemu-server,lxc}.
sub _guests {
    my $res = {};
    for my $dir (glob("$base/nodes/*/qemu-server $base/nodes/*/lxc")) {
        my ($node, $kind) = $dir =~ m!/nodes/([^/]+)/([^/]+)$!;
        for my $f (glob("$dir/*.conf")) {
            my ($vmid) = $f =~ m!/(\d+)\.conf$! or next;
            $res->{$vmid} = { node => $node, type => $kind eq 'lxc' ? 'lxc' : 'qemu', path => $f };
        }
    }
    return $res;
}

# The main section's `key: value` lines of one guest config (pmxcfs reads no snapshot or pending
# section either).
sub _props {
    my ($path, $want) = @_;
    open(my $fh, '<', $path) or return {};
    my $res = {};
    while (my $line = <$fh>) {
        last if $line =~ /^\[/;
        next if $line !~ /^([a-z][a-z0-9_-]*):\s*(.*?)\s*$/;
        $res->{$1} = $2 if $want->{$1};
    }
    close($fh);
    return $res;
}

sub ipcc_send_rec {
    my ($msgid, $data) = @_;
    $! = 0;
    if ($msgid == 1) { # CFS_IPC_GET_FS_VERSION: a new version each time, so lists are re-read
        $counter++;
        return encode_json({ starttime => $start, clinfo => 1, vmlist => $counter, version => $counter });
    } elsif ($msgid == 2) { # CFS_IPC_GET_CLUSTER_INFO: a standalone node has no corosync members
        return encode_json({ version => 1 });
    } elsif ($msgid == 3) { # CFS_IPC_GET_GUEST_LIST
        my $g = _guests();
        my $ids = {};
        # pmxcfs counts each write of a guest config; PVE::Cluster re-parses a config only when
        # its version changed. Every write here is a new file renamed over the old one (new
        # inode, new mtime), so those two stand for the count.
        for my $id (keys %$g) {
            my @st = Time::HiRes::stat($g->{$id}{path}) or next;
            my $version = ($st[1] * 7919 + int($st[9] * 1e6)) % 2**31 || 1;
            $ids->{$id} = { node => $g->{$id}{node}, type => $g->{$id}{type}, version => $version };
        }
        return encode_json({ version => $counter, ids => $ids });
    } elsif ($msgid == 4) { # CFS_IPC_SET_STATUS: name, then the data (none: remove the key)
        my ($name, $value) = unpack('Z256a*', $data);
        $value =~ s/\0$// if defined($value);
        my $f = _status_file($name);
        if (!defined($value) || $value eq '') {
            unlink($f);
        } else {
            mkdir($status_dir);
            open(my $fh, '>', "$f.$$") or die "$f: $!\n";
            print $fh $value;
            close($fh);
            rename("$f.$$", $f);
        }
        return '';
    } elsif ($msgid == 7) { # LOG_CLUSTER_MSG
        return '';
    } elsif ($msgid == 5) { # CFS_IPC_GET_STATUS: name, node (one node: ignored)
        my ($name) = unpack('Z256', $data);
        my $v = _slurp(_status_file($name));
        $! = ENOENT if !defined($v);
        return $v;
    } elsif ($msgid == 6) { # CFS_IPC_GET_CONFIG
        my ($path) = unpack('Z*', $data);
        my $res = _read($path);
        $! = ENOENT if !defined($res);
        return $res;
    } elsif ($msgid == 8) { # GET_CLUSTER_LOG
        return encode_json({ data => [] });
    } elsif ($msgid == 10) { # CFS_IPC_GET_RRD_DUMP: `key:row` per rrd/ key
        my $res = '';
        for my $f (sort glob("$status_dir/rrd%2F*")) {
            my ($key) = $f =~ m!/rrd%2F([^/]+)$!;
            $key =~ s/%2F/\//g;
            my $v = _slurp($f) // next;
            $res .= "$key:$v\n";
        }
        return $res;
    } elsif ($msgid == 11 || $msgid == 13) { # GET_GUEST_CONFIG_PROPERT{Y,IES}
        my ($vmid, @props);
        if ($msgid == 11) {
            ($vmid, my $p) = unpack('VZ*', $data);
            @props = ($p);
        } else {
            ($vmid, my $n, @props) = unpack('VC(Z*)*', $data);
        }
        my %want = map { $_ => 1 } @props;
        my $g = _guests();
        my $res = {};
        for my $id (sort keys %$g) {
            next if $vmid && $id != $vmid;
            my $p = _props($g->{$id}{path}, \%want);
            $res->{$id} = $p if %$p;
        }
        return encode_json($res);
    } elsif ($msgid == 12) { # CFS_IPC_VERIFY_TOKEN: a line of priv/token.cfg equals the token
        my ($token) = unpack('Z*', $data);
        if ($token eq '' || $token =~ /\n/) {
            $! = EINVAL;
            return undef;
        }
        my $cfg = _read('priv/token.cfg') // '';
        for my $line (split(/\n/, $cfg)) {
            return '' if $line eq $token;
        }
        $! = ENOENT;
        return undef;
    }
    $! = EINVAL;
    return undef;
}

sub sendfd {
    die "PVE::IPCC::sendfd is not available in the pve-real tier\n";
}

1;
