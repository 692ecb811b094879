package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestConflist checks kindnetd's CNI configuration for one IPv4 range.
func TestConflist(t *testing.T) {
	b, err := conflist([]string{"10.244.1.0/24"}, 1500)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		CNIVersion string
		Name       string
		Plugins    []struct {
			Type   string
			MTU    int
			IPMasq *bool
			IPAM   struct {
				Type   string
				Routes []struct{ Dst string }
				Ranges [][]struct{ Subnet string }
			}
			Capabilities map[string]bool
		}
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.CNIVersion != "0.3.1" || c.Name != "kindnet" || len(c.Plugins) != 2 {
		t.Fatalf("conflist %s", b)
	}
	ptp, pm := c.Plugins[0], c.Plugins[1]
	if ptp.Type != "ptp" || ptp.MTU != 1500 || ptp.IPMasq == nil || *ptp.IPMasq || ptp.IPAM.Type != "host-local" {
		t.Errorf("ptp plugin: %s", b)
	}
	if len(ptp.IPAM.Ranges) != 1 || ptp.IPAM.Ranges[0][0].Subnet != "10.244.1.0/24" ||
		len(ptp.IPAM.Routes) != 1 || ptp.IPAM.Routes[0].Dst != "0.0.0.0/0" {
		t.Errorf("ipam: %s", b)
	}
	if pm.Type != "portmap" || !pm.Capabilities["portMappings"] {
		t.Errorf("portmap plugin: %s", b)
	}
	if _, err := conflist([]string{"not-a-cidr"}, 0); err == nil {
		t.Error("a bad podCIDR was accepted")
	}
}

// TestWriteCNIConfig writes the file, and leaves it alone when unchanged.
func TestWriteCNIConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "net.d", "10-kindnet.conflist")
	if err := writeCNIConfig(p, []string{"10.244.2.0/24"}, 0); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeCNIConfig(p, []string{"10.244.2.0/24"}, 0); err != nil {
		t.Fatal(err)
	}
	fi2, _ := os.Stat(p)
	if !os.SameFile(fi, fi2) {
		t.Error("an unchanged configuration was written again")
	}
	if _, err := os.Stat(p + ".temp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left: %v", err)
	}
}
