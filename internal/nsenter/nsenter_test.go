package nsenter_test

import (
	"net"
	"os"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/nsenter"
)

// nsID is the (device, inode) pair that identifies a namespace file.
func nsID(t *testing.T, path string) [2]uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return [2]uint64{st.Dev, st.Ino}
}

// A socket made inside Run lives in the namespace; afterwards no thread of
// this process, the main thread included, is left in it.
func TestRunReturnsTheThread(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t)
	path := "/run/netns/" + ns.Name
	home := nsID(t, "/proc/self/ns/net")

	// Many concurrent calls, so that some land on the main thread.
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := nsenter.Run(path, func() error {
				if got := nsID(t, "/proc/thread-self/ns/net"); got != nsID(t, path) {
					t.Errorf("inside Run the thread is in %v, want the namespace %v", got, nsID(t, path))
				}
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return err
				}
				return l.Close()
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()

	if got := nsID(t, "/proc/self/ns/net"); got != home {
		t.Fatalf("the main thread stayed in another namespace (%v, want %v)", got, home)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if got := nsID(t, "/proc/self/task/"+task.Name()+"/ns/net"); got == nsID(t, path) {
			t.Errorf("thread %s is still in the namespace", task.Name())
		}
	}
	t.Logf("%d threads checked: none left in %s", len(tasks), ns.Name)
}

// A namespace that does not exist is an error naming it, and leaves the
// thread where it was.
func TestRunMissingNamespace(t *testing.T) {
	err := nsenter.Run("/run/netns/svcp-no-such-namespace", func() error {
		t.Fatal("fn ran without a namespace")
		return nil
	})
	if err == nil {
		t.Fatal("want an error for a missing namespace")
	}
	t.Log(err)
}
