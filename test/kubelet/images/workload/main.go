// The test workload of the kubelet tier: one static binary that a pod runs against its volume.
//
//	workload write  [--dir /data] [--file data.bin] [--bytes N] [--seed S] [--hold]
//	workload verify [--dir /data] [--file data.bin] [--hold]
//	workload hold   [--dir /data]
//
// write puts N bytes derived from the seed into the file (through a temporary file, fsync,
// rename, fsync of the directory), records the seed, size and checksum beside it in
// <file>.json, then reads the file back and checks it. verify reads what an earlier pod wrote
// and checks it against the record and the seed. Each mode prints one JSON report on stdout and
// into /dev/termination-log (so the pod's status carries it) with what a test asserts: the
// outcome, the checksum, the process's uid/gid/groups, the owner and mode of the directory and
// the file, and the filesystem's size. A failed check exits 1; with --hold a passed one keeps the
// container running until SIGTERM (exit 0), as a long-lived pod does, and prints a new report
// (mode "resized") each time the filesystem's size changes under it, an online expansion seen
// from inside the pod; after a write or verify it also reads the file again every 10 s and
// prints a report (mode "checked", with the time), so a test sees the data path still works
// after whatever it did to the node.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

type owner struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Mode string `json:"mode"`
}

type record struct {
	Seed      string `json:"seed"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
	Host      string `json:"host"`
	WrittenAt string `json:"writtenAt"`
}

type report struct {
	Mode    string  `json:"mode"`
	OK      bool    `json:"ok"`
	Error   string  `json:"error,omitempty"`
	Path    string  `json:"path,omitempty"`
	Bytes   int64   `json:"bytes,omitempty"`
	SHA256  string  `json:"sha256,omitempty"`
	Seed    string  `json:"seed,omitempty"`
	Writer  string  `json:"writer,omitempty"`
	Host    string  `json:"host"`
	UID     int     `json:"uid"`
	GID     int     `json:"gid"`
	Groups  []int   `json:"groups"`
	Dir     *owner  `json:"dir,omitempty"`
	File    *owner  `json:"file,omitempty"`
	FSBytes *uint64 `json:"fsBytes,omitempty"`
	At      string  `json:"at"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: workload write|verify|hold [--dir D] [--file F] [--bytes N] [--seed S] [--hold]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	dir := fs.String("dir", "/data", "the volume's mount path")
	file := fs.String("file", "data.bin", "the data file, relative to --dir")
	size := fs.Int64("bytes", 1<<20, "bytes to write (write)")
	seed := fs.String("seed", "", "what the data is derived from (write; default: the host name)")
	hold := fs.Bool("hold", false, "after a passed check, keep running until SIGTERM")
	_ = fs.Parse(os.Args[2:])

	host, _ := os.Hostname()
	r := report{Mode: mode, Host: host, UID: os.Getuid(), GID: os.Getgid(), At: now()}
	r.Groups, _ = os.Getgroups()
	if r.Groups == nil {
		r.Groups = []int{}
	}
	path := filepath.Join(*dir, *file)
	var err error
	switch mode {
	case "write":
		if *seed == "" {
			*seed = host
		}
		err = write(&r, path, *seed, *size)
	case "verify":
		err = verify(&r, path)
	case "hold":
		*hold = true
	default:
		err = fmt.Errorf("unknown mode %q (write, verify or hold)", mode)
	}
	describe(&r, *dir, path)
	r.OK = err == nil
	if err != nil {
		r.Error = err.Error()
	}
	emit(r)
	if err != nil {
		os.Exit(1)
	}
	if *hold {
		check := ""
		if mode == "write" || mode == "verify" {
			check = path
		}
		waitForTerm(r, *dir, check)
	}
}

// data is the content a seed stands for: SHA-256 of seed and block number, block after block,
// so a reader that knows only the seed can tell its bytes from anyone else's.
func data(seed string, n int64) []byte {
	out := make([]byte, 0, n+sha256.Size)
	for block := 0; int64(len(out)) < n; block++ {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", seed, block)))
		out = append(out, sum[:]...)
	}
	return out[:n]
}

func checksum(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func write(r *report, path, seed string, n int64) error {
	content := data(seed, n)
	r.Path, r.Seed, r.Bytes, r.SHA256 = path, seed, n, checksum(content)
	if err := writeDurably(path, content); err != nil {
		return err
	}
	rec := record{Seed: seed, Bytes: n, SHA256: r.SHA256, Host: r.Host, WrittenAt: time.Now().UTC().Format(time.RFC3339Nano)}
	meta, _ := json.Marshal(rec)
	if err := writeDurably(path+".json", meta); err != nil {
		return err
	}
	back, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if !bytes.Equal(back, content) {
		return fmt.Errorf("read back %d bytes (sha256 %s), wrote %d (sha256 %s)", len(back), checksum(back), n, r.SHA256)
	}
	return nil
}

// writeDurably: a temporary file, fsync, rename over the name, fsync of the directory, so the
// data and its name both reach the server before the report says so.
func writeDurably(path string, content []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.Write(content); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", filepath.Dir(path), err)
	}
	return nil
}

func verify(r *report, path string) error {
	r.Path = path
	meta, err := os.ReadFile(path + ".json")
	if err != nil {
		return fmt.Errorf("no record of an earlier write: %w", err)
	}
	var rec record
	if err := json.Unmarshal(meta, &rec); err != nil {
		return fmt.Errorf("record %s.json: %w", path, err)
	}
	r.Seed, r.Writer = rec.Seed, rec.Host
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	r.Bytes, r.SHA256 = int64(len(got)), checksum(got)
	if r.SHA256 != rec.SHA256 || r.Bytes != rec.Bytes {
		return fmt.Errorf("%s has %d bytes (sha256 %s); the writer on %s recorded %d (sha256 %s)",
			path, r.Bytes, r.SHA256, rec.Host, rec.Bytes, rec.SHA256)
	}
	if checksum(data(rec.Seed, rec.Bytes)) != rec.SHA256 {
		return errors.New("the record's checksum is not that of its seed's data")
	}
	return nil
}

// describe adds the owners and modes of the directory and the file, and the filesystem's size.
func describe(r *report, dir, path string) {
	r.Dir = stat(dir)
	if r.Mode != "hold" {
		r.File = stat(path)
	}
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) == nil {
		size := st.Blocks * uint64(st.Bsize)
		r.FSBytes = &size
	}
}

func stat(p string) *owner {
	info, err := os.Stat(p)
	if err != nil {
		return nil
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	// The raw permission bits, setgid included (fsGroup sets it on directories).
	return &owner{UID: st.Uid, GID: st.Gid, Mode: fmt.Sprintf("%#o", st.Mode&0o7777)}
}

func emit(r report) {
	line, _ := json.Marshal(r)
	fmt.Println(string(line))
	// The kubelet copies this file into the container's terminated state (terminationMessagePath).
	if f, err := os.OpenFile("/dev/termination-log", os.O_WRONLY|os.O_TRUNC, 0); err == nil {
		_, _ = f.Write(line)
		_ = f.Close()
	}
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// recheck reads the file again and compares it with what the first check found.
func recheck(r report, path string) report {
	r.Mode, r.At, r.Error = "checked", now(), ""
	got, err := os.ReadFile(path)
	switch {
	case err != nil:
		r.Error = err.Error()
	case checksum(got) != r.SHA256:
		r.Error = fmt.Sprintf("%s now has %d bytes (sha256 %s), not %d (sha256 %s)", path, len(got), checksum(got), r.Bytes, r.SHA256)
	}
	r.OK = r.Error == ""
	return r
}

func waitForTerm(r report, dir, check string) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-signals:
			os.Exit(0)
		case <-tick.C:
			if check != "" && n%10 == 0 {
				line, _ := json.Marshal(recheck(r, check))
				fmt.Println(string(line))
			}
			var st syscall.Statfs_t
			if syscall.Statfs(dir, &st) != nil {
				continue
			}
			size := st.Blocks * uint64(st.Bsize)
			if r.FSBytes != nil && *r.FSBytes == size {
				continue
			}
			r.Mode, r.FSBytes, r.At = "resized", &size, now()
			line, _ := json.Marshal(r)
			fmt.Println(string(line))
		}
	}
}
