#!/usr/bin/perl
# Stand-in for the lvm2 commands pve-storage's LVMPlugin and LvmThinPlugin run (/sbin/lvs, vgs,
# lvcreate, lvremove, lvrename, lvchange, lvextend, pvs, vgscan, vgchange), installed under those
# names in the pve-real tier's mount namespace: the host kernel has no device-mapper, so no real
# thin pool can exist here. One volume group with one thin pool; each thin volume is a sparse file
# /dev/<vg>/<lv>, its metadata a JSON file beside it (PVE_REAL_LVM). Output follows lvm2's report
# format for the options pve-storage passes (--separator : --noheadings --units b --nosuffix);
# names are checked as lvm2 checks them (lvm2 accepts `+`, which pve-storage's own name check does
# not), errors carry lvm2's texts and exit codes.

use strict;
use warnings;
use Fcntl qw(:flock);
use JSON::PP;
use File::Basename qw(basename);

my $dir = $ENV{PVE_REAL_LVM} // '/run/pve-real-lvm';
my $VG = 'pve';
my $POOL = 'data';
my $POOL_SIZE = 64 * 1024**3;

sub fail { my ($code, $msg) = @_; print STDERR "  $msg\n"; exit $code; }

open(my $lock, '>>', "$dir/.lock") or die "$dir/.lock: $!\n";
flock($lock, LOCK_EX);
my $state = -e "$dir/state.json"
    ? decode_json(do { local (@ARGV, $/) = ("$dir/state.json"); <> })
    : { lvs => {}, seq => 0 };
my $lvs = $state->{lvs};
sub save {
    open(my $fh, '>', "$dir/state.json.tmp") or die $!;
    print $fh encode_json($state);
    close($fh);
    rename("$dir/state.json.tmp", "$dir/state.json") or die $!;
}
sub file_of { "/dev/$VG/$_[0]" }

sub bytes {
    my ($s) = @_;
    $s =~ /^(\d+(?:\.\d+)?)([bBkKmMgGtT]?)$/ or fail(3, "Invalid size \"$s\"");
    my %m = (b => 1, k => 1024, m => 1024**2, g => 1024**3, t => 1024**4, '' => 1024**2);
    return int($1 * $m{ lc $2 });
}

# vg/lv, /dev/vg/lv or lv => lv name
sub lv_arg {
    my ($a) = @_;
    $a =~ s!^/dev/!!;
    $a =~ s!^\Q$VG\E/!!;
    return $a;
}

sub check_name {
    my ($n) = @_;
    fail(3, "Logical volume name \"$n\" is invalid.") if $n !~ /^[a-zA-Z0-9+_.-]+$/ || $n =~ /^-/;
}

my $cmd = basename($0);
my @args = @ARGV;
my %opt;
my @pos;
while (@args) {
    my $a = shift @args;
    if ($a =~ /^--(separator|units|options|config|name|thinpool|setautoactivation|addtag|deltag)$/) {
        $opt{$1} = shift @args;
    } elsif ($a =~ /^-(n|V|L|s|p|k|a)(.*)$/ && $a !~ /^-(?:aly|ay|an|aln|aey|ky|kn|prw|pr|K|y|f|s)$/) {
        $opt{$1} = $2 ne '' ? $2 : shift @args;
    } elsif ($a =~ /^-/) {
        $opt{flags}{$a} = 1;
    } else {
        push @pos, $a;
    }
}

my $used = 0;
$used += $_->{used} // 0 for values %$lvs;

if ($cmd eq 'vgs') {
    my @cols = split(',', $opt{options} // 'vg_name,vg_size,vg_free,lv_count');
    my %v = (vg_name => $VG, vg_size => $POOL_SIZE + 4 * 1024**3, vg_free => 4 * 1024**3 - 16 * 1024**2,
        lv_count => 1 + scalar(keys %$lvs), pv_name => '/dev/vda3', pv_size => $POOL_SIZE + 4 * 1024**3,
        pv_free => 4 * 1024**3 - 16 * 1024**2);
    print '  ', join(':', map { $v{$_} // '' } @cols), "\n";
} elsif ($cmd eq 'lvs') {
    my @cols = split(',', $opt{options} // 'vg_name,lv_name,lv_size');
    my @rows;
    my ($only) = map { lv_arg($_) } grep { $_ ne $VG } @pos;
    if (defined($only) && !$lvs->{$only}) {
        fail(5, "Failed to find logical volume \"$VG/$only\"");
    }
    push @rows, { lv_name => $POOL, lv_size => $POOL_SIZE, lv_attr => 'twi-aotz--',
        data_percent => sprintf('%.2f', 100 * $used / $POOL_SIZE), metadata_percent => '1.00',
        metadata_size => 1024**3, time => $state->{pooltime} //= time() } if !defined($only);
    for my $n (sort keys %$lvs) {
        next if defined($only) && $n ne $only;
        my $l = $lvs->{$n};
        push @rows, { lv_name => $n, lv_size => $l->{size},
            lv_attr => ($l->{ro} ? 'Vri' : 'Vwi') . ($l->{active} ? '-a' : '--') . '-tz-' . ($l->{skip} ? 'k' : '-'),
            pool_lv => $POOL, data_percent => '0.00', uuid => $l->{uuid}, tags => join(',', @{ $l->{tags} // [] }),
            time => $l->{ctime} };
    }
    for my $r (@rows) {
        $r->{vg_name} = $VG;
        $r->{uuid} //= 'pool';
        print '  ', join(':', map { $r->{$_} // '' } @cols), "\n";
    }
} elsif ($cmd eq 'lvcreate') {
    my $name = $opt{n} // $opt{name} // fail(3, 'Please specify a logical volume name.');
    check_name($name);
    fail(5, "Logical Volume \"$name\" already exists in volume group \"$VG\"") if $lvs->{$name} || $name eq $POOL;
    my $l = { ctime => time(), uuid => sprintf('standin-%06d', ++$state->{seq}), active => 1 };
    if (defined($opt{V})) {
        $l->{size} = bytes($opt{V});
        open(my $fh, '>', file_of($name)) or die "$!\n";
        truncate($fh, $l->{size});
        close($fh);
    } elsif (defined($opt{s}) || $opt{flags}{'-s'}) {
        my ($origin) = map { lv_arg($_) } (defined($opt{s}) && $opt{s} ne '' ? $opt{s} : @pos);
        my $o = $lvs->{$origin} // fail(5, "Failed to find logical volume \"$VG/$origin\"");
        $l->{size} = $o->{size};
        system('cp', '--sparse=always', '--reflink=auto', file_of($origin), file_of($name)) == 0 or die "copy failed\n";
        $l->{origin} = $origin;
        $l->{skip} = 1 if !($opt{k} && $opt{k} eq 'n') && !$opt{flags}{'-kn'};
    } else {
        fail(3, 'Please specify either size or extents.');
    }
    $l->{ro} = 1 if ($opt{p} // '') eq 'r' || $opt{flags}{'-pr'};
    $l->{skip} = 0 if $opt{flags}{'-kn'};
    $lvs->{$name} = $l;
    save();
    print "  Logical volume \"$name\" created.\n";
} elsif ($cmd eq 'lvremove') {
    for my $n (map { lv_arg($_) } @pos) {
        fail(5, "Failed to find logical volume \"$VG/$n\"") if !$lvs->{$n};
        delete $lvs->{$n};
        unlink(file_of($n));
        print "  Logical volume \"$n\" successfully removed.\n";
    }
    save();
} elsif ($cmd eq 'lvrename') {
    my ($vg, $old, $new) = @pos;
    ($old, $new) = map { lv_arg($_) } ($old, $new);
    check_name($new);
    fail(5, "Existing logical volume \"$old\" not found in volume group \"$VG\"") if !$lvs->{$old};
    fail(5, "Logical Volume \"$new\" already exists in volume group \"$VG\"") if $lvs->{$new};
    $lvs->{$new} = delete $lvs->{$old};
    rename(file_of($old), file_of($new));
    save();
    print "  Renamed \"$old\" to \"$new\" in volume group \"$VG\"\n";
} elsif ($cmd eq 'lvextend' || $cmd eq 'lvresize') {
    my ($n) = map { lv_arg($_) } @pos;
    my $l = $lvs->{$n} // fail(5, "Failed to find logical volume \"$VG/$n\"");
    my $size = bytes($opt{L});
    fail(5, "New size given ($size) not larger than existing size ($l->{size}).") if $size < $l->{size};
    $l->{size} = $size;
    truncate(file_of($n), $size);
    save();
    print "  Logical volume $VG/$n successfully resized.\n";
} elsif ($cmd eq 'lvchange') {
    for my $n (map { lv_arg($_) } @pos) {
        my $l = $lvs->{$n} // fail(5, "Failed to find logical volume \"$VG/$n\"");
        $l->{active} = 1 if grep { $opt{flags}{$_} } qw(-ay -aly -aey -K);
        $l->{active} = 0 if grep { $opt{flags}{$_} } qw(-an -aln);
        $l->{ro} = 1 if $opt{flags}{'-pr'};
        $l->{skip} = 1 if $opt{flags}{'-ky'};
        $l->{tags} = [grep { $_ ne $opt{deltag} } @{ $l->{tags} // [] }] if defined $opt{deltag};
        push @{ $l->{tags} }, $opt{addtag} if defined $opt{addtag};
    }
    save();
} elsif ($cmd =~ /^(pvs|vgscan|vgchange)$/) {
    # nothing to scan or activate: the one volume group is always there
} else {
    fail(3, "$cmd: not modelled by the pve-real tier's lvm stand-in");
}
exit 0;
