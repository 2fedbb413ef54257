// Command nvparse gives NVIDIA's own verdict on the configs gpupool renders for NVIDIA's node
// components: device-plugin configs (github.com/NVIDIA/k8s-device-plugin api/config/v1) and
// mig-parted configs (github.com/NVIDIA/mig-parted api/spec/v1), at the versions go.mod pins.
//
//	nvparse < batch.json                   # JSON [{name, kind, text, env}] in, JSON verdicts out
//	nvparse -kind device-plugin FILE...    # one verdict per file (YAML as the component reads it)
//
// kind is "device-plugin" or "mig-parted". env (device-plugin only) is the container
// environment the plugin would run with (e.g. MIG_STRATEGY, MPS_ROOT as the GPU operator sets
// them). A verdict is {name, ok, error, unknown}; unknown lists keys the component's structs
// do not have (its decoder drops them silently), and is not part of ok.
//
// This program imports NVIDIA's packages; it copies none of their code. What it cannot import
// (the plugin's start-up checks live in package main) is restated in checkStartup, citing it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	dpv1 "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	migv1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	cli "github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"
)

type item struct {
	Name string            `json:"name"`
	Kind string            `json:"kind"`
	Text string            `json:"text"`
	Env  map[string]string `json:"env,omitempty"`
}

type verdict struct {
	Name    string   `json:"name"`
	OK      bool     `json:"ok"`
	Error   string   `json:"error,omitempty"`
	Unknown []string `json:"unknown"`
	Configs []string `json:"configs,omitempty"` // mig-parted: the names under mig-configs
}

func main() {
	kind := flag.String("kind", "", "device-plugin | mig-parted (with FILE arguments)")
	flag.Parse()
	var items []item
	if flag.NArg() > 0 {
		for _, f := range flag.Args() {
			b, err := os.ReadFile(f)
			if err != nil {
				fail(err)
			}
			items = append(items, item{Name: f, Kind: *kind, Text: string(b)})
		}
	} else {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			fail(err)
		}
		if err := json.Unmarshal(b, &items); err != nil {
			fail(fmt.Errorf("stdin: a JSON list of {name, kind, text, env}: %v", err))
		}
	}
	out := make([]verdict, 0, len(items))
	for _, it := range items {
		out = append(out, judge(it))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "nvparse:", err)
	os.Exit(2)
}

func judge(it item) verdict {
	v := verdict{Name: it.Name, Unknown: []string{}}
	var err error
	switch it.Kind {
	case "device-plugin":
		err = devicePlugin(it, &v)
	case "mig-parted":
		err = migParted(it, &v)
	default:
		err = fmt.Errorf("unknown kind %q", it.Kind)
	}
	v.OK = err == nil
	if err != nil {
		v.Error = err.Error()
	}
	return v
}

// migParted parses as mig-manager does (cmd/nvidia-mig-parted/assert/assert.go: sigs.k8s.io/yaml
// into v1.Spec, whose UnmarshalJSON refuses unknown versions and fields and checks profile
// formats and counts).
func migParted(it item, v *verdict) error {
	var spec migv1.Spec
	if err := yaml.Unmarshal([]byte(it.Text), &spec); err != nil {
		return err
	}
	for name := range spec.MigConfigs {
		v.Configs = append(v.Configs, name)
	}
	sort.Strings(v.Configs)
	return nil
}

// devicePlugin loads the config the way the plugin's start-up does (cmd/nvidia-device-plugin
// main.go `loadConfig`: api/config/v1 `NewConfig` over the config file, then the command line
// and environment on top; `DisableResourceNamingInConfig`), then applies checkStartup.
func devicePlugin(it item, v *verdict) error {
	f, err := os.CreateTemp("", "nvparse-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(it.Text); err != nil {
		return err
	}
	f.Close()
	v.Unknown = unknownKeys(it.Text)

	for _, k := range pluginEnv {
		os.Unsetenv(k)
	}
	for k, val := range it.Env {
		os.Setenv(k, val)
	}
	defer func() {
		for k := range it.Env {
			os.Unsetenv(k)
		}
	}()

	var config *dpv1.Config
	flags := pluginFlags()
	app := &cli.App{
		Name:   "nvparse",
		Flags:  flags,
		Writer: io.Discard,
		Action: func(c *cli.Context) error {
			var err error
			config, err = dpv1.NewConfig(c, flags)
			if err != nil {
				return fmt.Errorf("unable to load config: unable to finalize config: %v", err)
			}
			config.Flags.GFD = nil
			dpv1.DisableResourceNamingInConfig(config)
			return checkStartup(config)
		},
	}
	return app.Run([]string{"nvparse", "--config-file", f.Name()})
}

var pluginEnv = []string{"MIG_STRATEGY", "MPS_ROOT", "FAIL_ON_INIT_ERROR", "DEVICE_LIST_STRATEGY",
	"DEVICE_ID_STRATEGY", "DEVICE_DISCOVERY_STRATEGY", "IMEX_CHANNEL_IDS", "IMEX_REQUIRED"}

// pluginFlags are the device plugin's flags that reach api/config/v1 Flags, with the names,
// defaults and environment variables of cmd/nvidia-device-plugin/main.go (v0.19.3).
func pluginFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: dpv1.MigStrategyNone, EnvVars: []string{"MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"FAIL_ON_INIT_ERROR"}},
		&cli.StringFlag{Name: "driver-root", Value: "/"},
		&cli.StringFlag{Name: "dev-root"},
		&cli.BoolFlag{Name: "pass-device-specs"},
		&cli.StringSliceFlag{Name: "device-list-strategy",
			Value:   cli.NewStringSlice(string(dpv1.DeviceListStrategyEnvVar)),
			EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.StringFlag{Name: "device-id-strategy", Value: dpv1.DeviceIDStrategyUUID,
			EnvVars: []string{"DEVICE_ID_STRATEGY"}},
		&cli.BoolFlag{Name: "gdrcopy-enabled"},
		&cli.BoolFlag{Name: "gds-enabled"},
		&cli.BoolFlag{Name: "mofed-enabled"},
		&cli.StringFlag{Name: "cdi-annotation-prefix", Value: dpv1.DefaultCDIAnnotationPrefix},
		&cli.StringFlag{Name: "nvidia-cdi-hook-path", Value: dpv1.DefaultNvidiaCTKPath},
		&cli.StringFlag{Name: "driver-root-ctr-path", Value: dpv1.DefaultContainerDriverRoot},
		&cli.StringFlag{Name: "mps-root", EnvVars: []string{"MPS_ROOT"}},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "auto",
			EnvVars: []string{"DEVICE_DISCOVERY_STRATEGY"}},
		&cli.IntSliceFlag{Name: "imex-channel-ids", EnvVars: []string{"IMEX_CHANNEL_IDS"}},
		&cli.BoolFlag{Name: "imex-required", EnvVars: []string{"IMEX_REQUIRED"}},
		&cli.StringFlag{Name: "config-file"},
	}
}

// checkStartup restates the checks of cmd/nvidia-device-plugin/main.go `validateFlags`
// (v0.19.3) that depend on the config alone (not the one that needs NVML on the host), with
// the plugin's messages: it runs them before it looks at any device, and a failure stops it.
func checkStartup(c *dpv1.Config) error {
	wrap := func(format string, a ...any) error {
		return fmt.Errorf("unable to validate flags: "+format, a...)
	}
	p := c.Flags.Plugin
	if _, err := dpv1.NewDeviceListStrategies(*p.DeviceListStrategy); err != nil {
		return wrap("invalid --device-list-strategy option: %v", err)
	}
	if *p.DeviceIDStrategy != dpv1.DeviceIDStrategyUUID && *p.DeviceIDStrategy != dpv1.DeviceIDStrategyIndex {
		return wrap("invalid --device-id-strategy option: %v", *p.DeviceIDStrategy)
	}
	if c.Sharing.SharingStrategy() == dpv1.SharingStrategyMPS {
		if *c.Flags.MigStrategy == dpv1.MigStrategyMixed {
			return wrap("using --mig-strategy=mixed is not supported with MPS")
		}
		if c.Flags.MpsRoot == nil || *c.Flags.MpsRoot == "" {
			return wrap("using MPS requires --mps-root to be specified")
		}
	}
	switch *c.Flags.DeviceDiscoveryStrategy {
	case "auto", "nvml", "tegra":
	default:
		return wrap("invalid --device-discovery-strategy option %v", *c.Flags.DeviceDiscoveryStrategy)
	}
	switch *c.Flags.MigStrategy {
	case dpv1.MigStrategyNone, dpv1.MigStrategySingle, dpv1.MigStrategyMixed:
	default:
		return wrap("unknown MIG strategy: %v", *c.Flags.MigStrategy)
	}
	if err := dpv1.AssertChannelIDsValid(c.Imex.ChannelIDs); err != nil {
		return wrap("invalid IMEX channel IDs: %v", err)
	}
	return nil
}

// unknownKeys lists the keys of a device-plugin config that api/config/v1's types do not
// define: sigs.k8s.io/yaml (as parseConfigFrom uses it) drops them without a word.
func unknownKeys(text string) []string {
	var doc any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return []string{}
	}
	var out []string
	walk(doc, reflectType[dpv1.Config](), "", &out)
	if out == nil {
		out = []string{}
	}
	return out
}

func joinPath(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}
