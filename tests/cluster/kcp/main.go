// Command kcp is the test suite's Kubernetes control plane in one binary:
// etcd (embedded), kube-apiserver, kube-scheduler and kube-controller-manager
// from the upstream Go modules, plus a small certificate generator.
//
// One binary rather than four keeps link time and disk use down; each
// subcommand runs exactly one component, so the components never share
// process-global state (feature gates, flags, metrics registries).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as the upstream mains do
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as the upstream mains do
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

const usage = `usage: kcp <subcommand> [flags]

subcommands:
  etcd                     embedded etcd server (kcp etcd -h)
  certs                    write CA, serving, client and service-account keys (kcp certs -h)
  kube-apiserver           upstream kube-apiserver; flags as upstream
  kube-scheduler           upstream kube-scheduler; flags as upstream
  kube-controller-manager  upstream kube-controller-manager; flags as upstream
  version                  print the Kubernetes version this binary was built from
`

func runCobra(cmd *cobra.Command, args []string) int {
	cmd.SetArgs(args)
	return cli.Run(cmd)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	sub, args := os.Args[1], os.Args[2:]
	var code int
	switch sub {
	case "etcd":
		code = runEtcd(args)
	case "certs":
		code = runCerts(args)
	case "kube-apiserver":
		code = runCobra(apiserver.NewAPIServerCommand(), args)
	case "kube-scheduler":
		code = runCobra(scheduler.NewSchedulerCommand(), args)
	case "kube-controller-manager":
		code = runCobra(controllermanager.NewControllerManagerCommand(), args)
	case "version":
		code = runVersion()
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "kcp: unknown subcommand %q\n%s", sub, usage)
		code = 2
	}
	os.Exit(code)
}
