// kubeletsim plays the kubelet's side of the device-plugin API (k8s.io/kubelet
// pkg/apis/deviceplugin/v1beta1) for NVIDIA's real nvidia-device-plugin in the test suite.
//
// It serves the Registration service on <dir>/kubelet.sock, then starts the plugin (the argv
// after "--") as its child, so both share the mount namespace the caller set up (tests bind a
// scratch directory over /var/lib: the plugin's socket directory is hard-coded). For every
// registered resource it opens ListAndWatch and prints each answer as one JSON line on stdout.
// JSON lines on stdin ask for Allocate and GetPreferredAllocation; answers go to stdout.
// The plugin's own log goes to stderr. Python reads this protocol: tests/nvidia/real_plugin.py.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type device struct {
	ID     string  `json:"id"`
	Health string  `json:"health"`
	NUMA   []int64 `json:"numa,omitempty"`
}

// event is one line on stdout.
type event struct {
	Event     string              `json:"event"`
	Resource  string              `json:"resource,omitempty"`
	Endpoint  string              `json:"endpoint,omitempty"`
	Preferred bool                `json:"preferred,omitempty"`
	Devices   []device            `json:"devices,omitempty"`
	Seq       int                 `json:"seq,omitempty"`
	Envs      map[string]string   `json:"envs,omitempty"`
	IDs       []string            `json:"ids,omitempty"`
	Error     string              `json:"error,omitempty"`
	Code      int                 `json:"code,omitempty"`
	Extra     map[string][]string `json:"extra,omitempty"`
}

// request is one line on stdin.
type request struct {
	Op          string   `json:"op"` // allocate | preferred
	Seq         int      `json:"seq"`
	Resource    string   `json:"resource"`
	IDs         []string `json:"ids"`
	MustInclude []string `json:"mustInclude"`
	Size        int32    `json:"size"`
}

type sim struct {
	dir     string
	mu      sync.Mutex
	out     *json.Encoder
	clients map[string]pluginapi.DevicePluginClient
	pluginapi.UnimplementedRegistrationServer
}

func (s *sim) emit(e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.out.Encode(e)
}

func (s *sim) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported device plugin API version %q", r.Version)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(s.dir, r.Endpoint),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	client := pluginapi.NewDevicePluginClient(conn)
	s.mu.Lock()
	s.clients[r.ResourceName] = client
	s.mu.Unlock()
	preferred := r.Options != nil && r.Options.GetPreferredAllocationAvailable
	s.emit(event{Event: "registered", Resource: r.ResourceName, Endpoint: r.Endpoint, Preferred: preferred})
	go s.watch(r.ResourceName, client)
	return &pluginapi.Empty{}, nil
}

func (s *sim) watch(resource string, client pluginapi.DevicePluginClient) {
	stream, err := client.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		s.emit(event{Event: "watch-error", Resource: resource, Error: err.Error()})
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			s.emit(event{Event: "watch-end", Resource: resource, Error: err.Error()})
			return
		}
		devs := []device{}
		for _, d := range resp.Devices {
			dv := device{ID: d.ID, Health: d.Health}
			if d.Topology != nil {
				for _, n := range d.Topology.Nodes {
					dv.NUMA = append(dv.NUMA, n.ID)
				}
			}
			devs = append(devs, dv)
		}
		s.emit(event{Event: "devices", Resource: resource, Devices: devs})
	}
}

func (s *sim) serve(req request) {
	s.mu.Lock()
	client := s.clients[req.Resource]
	s.mu.Unlock()
	reply := event{Event: req.Op, Seq: req.Seq, Resource: req.Resource}
	if client == nil {
		reply.Error = "no device plugin registered for " + req.Resource
		s.emit(reply)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch req.Op {
	case "allocate":
		resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: req.IDs}}})
		if err != nil {
			reply.Error = err.Error()
		} else if len(resp.ContainerResponses) == 1 {
			c := resp.ContainerResponses[0]
			reply.Envs = c.Envs
			reply.Extra = map[string][]string{}
			for _, m := range c.Mounts {
				reply.Extra["mounts"] = append(reply.Extra["mounts"], m.ContainerPath)
			}
			for _, d := range c.Devices {
				reply.Extra["devices"] = append(reply.Extra["devices"], d.ContainerPath)
			}
			for _, d := range c.CdiDevices {
				reply.Extra["cdi"] = append(reply.Extra["cdi"], d.Name)
			}
		}
	case "preferred":
		resp, err := client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
				AvailableDeviceIDs: req.IDs, MustIncludeDeviceIDs: req.MustInclude,
				AllocationSize: req.Size}}})
		if err != nil {
			reply.Error = err.Error()
		} else if len(resp.ContainerResponses) == 1 {
			reply.IDs = resp.ContainerResponses[0].DeviceIDs
		}
	default:
		reply.Error = "unknown op " + req.Op
	}
	s.emit(reply)
}

func main() {
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin socket directory")
	flag.Parse()
	s := &sim{dir: *dir, out: json.NewEncoder(os.Stdout), clients: map[string]pluginapi.DevicePluginClient{}}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "kubeletsim:", err)
		os.Exit(2)
	}
	sock := filepath.Join(*dir, "kubelet.sock")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeletsim:", err)
		os.Exit(2)
	}
	server := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(server, s)
	go func() { _ = server.Serve(lis) }()
	s.emit(event{Event: "listening", Endpoint: sock})

	if args := flag.Args(); len(args) > 0 {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout = os.Stderr
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			s.emit(event{Event: "plugin-exit", Error: err.Error(), Code: -1})
			os.Exit(1)
		}
		go func() {
			err := cmd.Wait()
			e := event{Event: "plugin-exit", Code: cmd.ProcessState.ExitCode()}
			if err != nil {
				e.Error = err.Error()
			}
			s.emit(e)
		}()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			s.emit(event{Event: "bad-request", Error: err.Error()})
			continue
		}
		go s.serve(req)
	}
	// stdin closed: the test is done with us; the caller kills the process group.
}
