package nftables

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNFTEnv(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"no tunables", []string{"PATH=/bin"}, []string{"PATH=/bin", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}},
		{"empty tunables", []string{"GLIBC_TUNABLES="}, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}},
		{"other tunables kept", []string{"GLIBC_TUNABLES=glibc.malloc.check=3", "HOME=/root"},
			[]string{"GLIBC_TUNABLES=glibc.malloc.check=3:glibc.malloc.hugetlb=1", "HOME=/root"}},
		{"a trailing colon", []string{"GLIBC_TUNABLES=glibc.malloc.check=3:"}, []string{"GLIBC_TUNABLES=glibc.malloc.check=3:glibc.malloc.hugetlb=1"}},
		{"the operator's hugetlb wins", []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, nftEnv(tt.env))
		})
	}
}
