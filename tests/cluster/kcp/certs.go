package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// runCerts writes, into --dir, the PEM files a single-host control plane needs:
//
//	ca.crt ca.key                          the one CA that signs everything and that every
//	                                        component trusts (serving and client certs)
//	apiserver.crt apiserver.key            serving cert for 127.0.0.1, ::1, localhost, the
//	                                        in-cluster names and the first service IP
//	admin.crt admin.key                    client cert, CN=kubernetes-admin O=system:masters
//	scheduler.crt scheduler.key            client cert, CN=system:kube-scheduler
//	controller-manager.crt .key            client cert, CN=system:kube-controller-manager
//	apiserver-etcd-client.crt .key         spare client cert for a TLS etcd (unused over http)
//	front-proxy-ca.crt .key                a second CA, trusted only for request-header
//	                                        authentication (--requestheader-client-ca-file)
//	front-proxy-client.crt .key            CN=front-proxy-client, the apiserver's proxy client
//	                                        cert (--proxy-client-cert-file)
//	sa.key sa.pub                          RSA key pair that signs/verifies service-account tokens
func runCerts(args []string) int {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	dir := fs.String("dir", "", "output directory (required; created)")
	hosts := fs.String("hosts", "", "extra comma-separated DNS names or IPs for the apiserver cert")
	serviceIP := fs.String("service-ip", "10.0.0.1", "first IP of the service CIDR (the kubernetes service)")
	days := fs.Int("days", 30, "validity in days")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "kcp certs: --dir is required")
		return 2
	}
	if err := writeCerts(*dir, *hosts, *serviceIP, time.Duration(*days)*24*time.Hour); err != nil {
		fmt.Fprintln(os.Stderr, "kcp certs:", err)
		return 1
	}
	return 0
}

func writeCerts(dir, extraHosts, serviceIP string, validity time.Duration) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	notBefore := time.Now().Add(-time.Hour)
	notAfter := notBefore.Add(validity)

	caCert, caKey, err := writeCA(dir, "ca", "gpupool-test-ca", notBefore, notAfter)
	if err != nil {
		return err
	}
	proxyCACert, proxyCAKey, err := writeCA(dir, "front-proxy-ca", "gpupool-test-front-proxy-ca", notBefore, notAfter)
	if err != nil {
		return err
	}

	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local"}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if ip := net.ParseIP(serviceIP); ip != nil {
		ips = append(ips, ip)
	}
	for _, h := range strings.Split(extraHosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}

	leaves := []struct {
		file    string
		subject pkix.Name
		usage   []x509.ExtKeyUsage
		dns     []string
		ips     []net.IP
		ca      *x509.Certificate
		caKey   crypto.Signer
	}{
		{"apiserver", pkix.Name{CommonName: "kube-apiserver"}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, dns, ips, caCert, caKey},
		{"admin", pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}}, clientUsage, nil, nil, caCert, caKey},
		{"scheduler", pkix.Name{CommonName: "system:kube-scheduler"}, clientUsage, nil, nil, caCert, caKey},
		{"controller-manager", pkix.Name{CommonName: "system:kube-controller-manager"}, clientUsage, nil, nil, caCert, caKey},
		{"apiserver-etcd-client", pkix.Name{CommonName: "kube-apiserver-etcd-client"}, clientUsage, nil, nil, caCert, caKey},
		{"front-proxy-client", pkix.Name{CommonName: "front-proxy-client"}, clientUsage, nil, nil, proxyCACert, proxyCAKey},
	}
	for _, l := range leaves {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      l.subject,
			NotBefore:    notBefore,
			NotAfter:     notAfter,
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  l.usage,
			DNSNames:     l.dns,
			IPAddresses:  l.ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, l.ca, key.Public(), l.caKey)
		if err != nil {
			return fmt.Errorf("%s: %w", l.file, err)
		}
		if err := writePair(dir, l.file, der, key); err != nil {
			return err
		}
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub, 0o644)
}

// writeCA makes a self-signed CA and writes <name>.crt and <name>.key.
func writeCA(dir, name, cn string, notBefore, notAfter time.Time) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, writePair(dir, name, der, key)
}

var clientUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}
	return n
}

func writePair(dir, name string, der []byte, key crypto.Signer) error {
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
