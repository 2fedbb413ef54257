package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func parseURLs(s string) ([]url.URL, error) {
	var out []url.URL
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, *u)
	}
	return out, nil
}

// runEtcd runs a single-member etcd cluster until SIGTERM/SIGINT.
func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory (required); state survives restarts")
	name := fs.String("name", "default", "member name")
	clientURLs := fs.String("listen-client-urls", "http://127.0.0.1:2379", "comma-separated client URLs (also advertised)")
	peerURLs := fs.String("listen-peer-urls", "http://127.0.0.1:2380", "comma-separated peer URLs (also advertised)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	quotaBytes := fs.Int64("quota-backend-bytes", 0, "backend size quota; 0 keeps etcd's default")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "kcp etcd: --data-dir is required")
		return 2
	}
	cu, err := parseURLs(*clientURLs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kcp etcd: --listen-client-urls:", err)
		return 2
	}
	pu, err := parseURLs(*peerURLs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kcp etcd: --listen-peer-urls:", err)
		return 2
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dataDir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = cu, cu
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = pu, pu
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = *logLevel
	if *quotaBytes > 0 {
		cfg.QuotaBackendBytes = *quotaBytes
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kcp etcd: start:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "kcp etcd: ready, serving clients on", *clientURLs)
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "kcp etcd: not ready after 60s")
		e.Server.Stop()
		return 1
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Fprintln(os.Stderr, "kcp etcd: stopping on", s)
		return 0
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "kcp etcd: server error:", err)
		return 1
	}
}
