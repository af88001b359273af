// node-driver-registrar for the kubelet tier: registers a CSI driver's node socket with the
// kubelet through the kubelet's plugin watcher (the plugins_registry directory), as the
// kubernetes-csi sidecar of the same name does. The upstream module cannot be fetched here (the
// module proxy refuses every version of github.com/kubernetes-csi/node-driver-registrar), so this
// implements its contract, read from its documentation and behaviour:
//
//   - flags: --csi-address (the driver socket inside the container), --kubelet-registration-path
//     (the same socket as the kubelet sees it; required), --plugin-registration-path (default
//     /registration), --http-endpoint or --health-port (/healthz), --timeout, --mode
//     (kubelet-registration-probe exits 0 at once), --version; --v and --connection-timeout are
//     accepted as upstream accepts them.
//   - the driver's name comes from CSI GetPluginInfo on --csi-address (waiting for the socket);
//   - the registration socket is <plugin-registration-path>/<driver>-reg.sock, created with
//     umask 077 after removing a stale one; it serves pluginregistration.v1 Registration:
//     GetInfo answers type CSIPlugin, the driver's name, the kubelet-side endpoint and the
//     supported version 1.0.0; NotifyRegistrationStatus with registered=false exits 1 (the
//     container restarts and registers again);
//   - /healthz: 404 while the registration socket is missing, 500 when it does not answer
//     GetInfo with the driver's name, 200 "ok" otherwise;
//   - SIGTERM removes the registration socket and exits 0 (the kubelet then deregisters).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// version is stamped at build time: the chart's pin of the upstream sidecar it stands in for.
var version = "dev"

var (
	csiAddress       = flag.String("csi-address", "/run/csi/socket", "path of the CSI driver socket")
	registrationDir  = flag.String("plugin-registration-path", "/registration", "the kubelet's plugin registration directory")
	kubeletEndpoint  = flag.String("kubelet-registration-path", "", "path of the CSI driver socket on the node, as the kubelet sees it")
	healthPort       = flag.Int("health-port", 0, "(deprecated) TCP port of /healthz; 0: none")
	httpEndpoint     = flag.String("http-endpoint", "", "address of the /healthz server (e.g. :8080); empty: none")
	operationTimeout = flag.Duration("timeout", time.Second, "timeout of each call to the driver and of the health check")
	mode             = flag.String("mode", "", "kubelet-registration-probe: exit 0 without registering (deprecated upstream)")
	showVersion      = flag.Bool("version", false, "print the version")
	_                = flag.Int("v", 0, "log verbosity (accepted; this registrar logs every step)")
	_                = flag.Duration("connection-timeout", 0, "(deprecated upstream) ignored")
)

type registration struct {
	registerapi.UnsafeRegistrationServer
	driver string
}

func (r registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.driver,
		Endpoint:          *kubeletEndpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		log.Printf("the kubelet refused the registration of %s: %s; exiting so the container restarts", r.driver, s.Error)
		os.Exit(1)
	}
	log.Printf("the kubelet registered %s", r.driver)
	return &registerapi.RegistrationStatusResponse{}, nil
}

func main() {
	log.SetFlags(log.Ldate | log.Ltime | log.Lmicroseconds | log.LUTC)
	log.SetPrefix("node-driver-registrar: ")
	flag.Parse()
	if *showVersion {
		fmt.Println(os.Args[0], version)
		return
	}
	if *kubeletEndpoint == "" {
		log.Fatal("--kubelet-registration-path is required")
	}
	if *mode == "kubelet-registration-probe" {
		return
	}
	if *healthPort > 0 && *httpEndpoint != "" {
		log.Fatal("only one of --health-port and --http-endpoint can be set")
	}
	addr := *httpEndpoint
	if *healthPort > 0 {
		addr = ":" + strconv.Itoa(*healthPort)
	}
	log.Printf("version %s: asking the driver at %s for its name", version, *csiAddress)
	driver, err := driverName(*csiAddress)
	if err != nil {
		log.Fatalf("driver name: %v", err)
	}
	socket := fmt.Sprintf("%s/%s-reg.sock", *registrationDir, driver)
	lis, err := listen(socket)
	if err != nil {
		log.Fatalf("registration socket: %v", err)
	}
	server := grpc.NewServer()
	registerapi.RegisterRegistrationServer(server, registration{driver: driver})
	go removeOnTerm(socket)
	if addr != "" {
		go serveHealth(addr, socket, driver)
	}
	log.Printf("serving the registration of %s (endpoint %s) on %s", driver, *kubeletEndpoint, socket)
	if err := server.Serve(lis); err != nil {
		log.Fatalf("registration server stopped: %v", err)
	}
}

func dial(socket string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// driverName waits for the driver's socket (the driver container may start later) and asks it
// for its name; an answer other than "unavailable" is final.
func driverName(socket string) (string, error) {
	conn, err := dial(socket)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	client := csi.NewIdentityClient(conn)
	var last time.Time
	for ; ; time.Sleep(time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), *operationTimeout)
		info, err := client.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			if info.GetName() == "" {
				return "", errors.New("GetPluginInfo returned an empty name")
			}
			return info.GetName(), nil
		}
		if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
			return "", err
		}
		if time.Since(last) > 10*time.Second {
			log.Printf("still waiting for the driver at %s: %v", socket, err)
			last = time.Now()
		}
	}
}

// listen binds the registration socket readable by its owner only; a stale socket from an
// earlier run is removed first, anything else at that path is left alone (and Listen fails).
func listen(socket string) (net.Listener, error) {
	if info, err := os.Lstat(socket); err == nil && info.Mode()&os.ModeSocket != 0 {
		if err := os.Remove(socket); err != nil {
			return nil, err
		}
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	return net.Listen("unix", socket)
}

func removeOnTerm(socket string) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	s := <-signals
	log.Printf("%v: removing %s", s, socket)
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		log.Fatalf("remove %s: %v", socket, err)
	}
	os.Exit(0)
}

func serveHealth(addr, socket, driver string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		code, msg := health(socket, driver)
		if code != http.StatusOK {
			log.Printf("health check failed: %s", msg)
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(msg))
	})
	log.Fatal(http.ListenAndServe(addr, mux))
}

func health(socket, driver string) (int, string) {
	info, err := os.Stat(socket)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return http.StatusNotFound, "registration socket does not exist"
	case err != nil:
		return http.StatusInternalServerError, err.Error()
	case info.Mode()&os.ModeSocket == 0:
		return http.StatusInternalServerError, socket + " is not a socket"
	}
	conn, err := dial(socket)
	if err != nil {
		return http.StatusInternalServerError, err.Error()
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *operationTimeout)
	defer cancel()
	got, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return http.StatusInternalServerError, "registration socket does not answer GetInfo: " + err.Error()
	}
	if got.GetName() != driver {
		return http.StatusInternalServerError, "registration socket serves " + got.GetName()
	}
	return http.StatusOK, "ok"
}
