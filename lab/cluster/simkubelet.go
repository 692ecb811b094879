package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	"github.com/svcproxy/svcproxy/lab/pods"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// SimulatedKubelet plays the kubelet of the lab's one node, and its
// scheduler, in the control-plane lab (a real node runs the real kubelet:
// Node). It registers the Node, binds every unscheduled pod to it, and for
// each pod bound there makes a network namespace, runs `svclab pod` in it
// on the container ports, and reports the pod Running and Ready with its
// address through the API. A pod being deleted is stopped, its namespace
// removed, and then deleted for good, as the kubelet does after the grace
// period. Readiness afterwards is the user's to change (`svclab pod NAME
// --ready`): there are no probes.
//
// `svclab up --control-plane` runs it as `svclab kubelet`, in the machine's
// namespaces (it makes the pods'); its connections to the API server start
// inside the node. It uses the administrator's token: a real kubelet has a node
// identity that the Node authorizer limits to its own node and pods, and
// binding is the scheduler's.
type SimulatedKubelet struct {
	net    *topology.Net
	runner *pods.Runner
	client kubernetes.Interface
	log    *slog.Logger
	node   string
	pods   corelisters.PodLister
	queue  workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex // guards running, and address allocation
	// running are the pods this kubelet started: host name -> the pod's UID,
	// and the address each has.
	running map[string]types.UID
	addrs   map[string]netip.Addr
}

// SimulatedKubeletConfig says where a SimulatedKubelet runs its pods and
// which API server it reports to.
type SimulatedKubeletConfig struct {
	// Net is the lab whose node it plays, and where the pods' namespaces go.
	Net *topology.Net
	// Pods starts and stops the pods' servers.
	Pods *pods.Runner
	// Client talks to the lab's API server (Cluster.Client).
	Client kubernetes.Interface
	// Log gets a line per pod started; nil logs nothing.
	Log *slog.Logger
}

// workers is how many pods start at once: a pod takes a dozen `ip` commands
// and a process start, and the queue never hands one pod to two workers.
const workers = 4

// NewSimulatedKubelet returns the lab's simulated kubelet.
func NewSimulatedKubelet(cfg SimulatedKubeletConfig) *SimulatedKubelet {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SimulatedKubelet{
		net:     cfg.Net,
		runner:  cfg.Pods,
		client:  cfg.Client,
		log:     log,
		node:    cfg.Net.Plan().Node.Name,
		running: map[string]types.UID{},
		addrs:   map[string]netip.Addr{},
	}
}

// Run registers the node, then keeps the pods in step until ctx ends. The
// pods keep running after it returns: they are processes of their own.
func (k *SimulatedKubelet) Run(ctx context.Context) error {
	if err := k.registerNode(ctx); err != nil {
		return err
	}
	k.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubelet"})
	defer k.queue.ShutDown()
	factory := informers.NewSharedInformerFactory(k.client, 0)
	inf := factory.Core().V1().Pods()
	k.pods = inf.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return ctx.Err()
	}
	k.log.Info("kubelet ready", "node", k.node)
	go func() { <-ctx.Done(); k.queue.ShutDown() }()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k.next(ctx) {
			}
		})
	}
	wg.Wait()
	return nil
}

// next handles one key from the queue; false once the queue is shut down.
func (k *SimulatedKubelet) next(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.sync(ctx, key); err != nil {
		k.log.Warn("pod sync failed, will retry", "pod", key, "err", err)
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

// sync brings one pod's processes in line with its object.
func (k *SimulatedKubelet) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not ours to retry
	}
	host := podHostName(ns, name)
	pod, err := k.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return k.stop(host)
	}
	if err != nil {
		return err
	}
	switch {
	case pod.Spec.NodeName == "":
		return k.bind(ctx, pod)
	case pod.Spec.NodeName != k.node, pod.Spec.HostNetwork, isMirror(pod):
		return nil // another node's, or not run by us (clusterdns's mirror pod)
	case pod.DeletionTimestamp != nil:
		if err := k.stop(host); err != nil {
			return err
		}
		// The kubelet's last word: the containers are gone, delete it now.
		uid := pod.UID
		err := k.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &uid}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return nil
	}
	if uid, ok := k.runningUID(host); ok {
		if uid == pod.UID {
			return nil
		}
		// The same name, a new pod (a StatefulSet's replacement): the old
		// one's processes go first.
		if err := k.stop(host); err != nil {
			return err
		}
	}
	h, err := k.claim(pod)
	if err != nil {
		return err
	}
	if err := k.start(ctx, h); err != nil {
		_ = k.stop(host)
		return err
	}
	k.log.Info("pod started", "pod", key, "ip", h.Addr)
	return k.reportRunning(ctx, pod, h)
}

// bind schedules pod onto the one node, as kube-scheduler would.
func (k *SimulatedKubelet) bind(ctx context.Context, pod *corev1.Pod) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: k.node},
	}
	err := k.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // bound or deleted meanwhile
	}
	return err
}

func isMirror(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}

// podHostName is the lab host of a pod: its name in namespace default (so
// web-0 is the file-fed lab's web-0), NAME.NAMESPACE elsewhere.
func podHostName(ns, name string) string {
	if ns == "default" {
		return name
	}
	return name + "." + ns
}

func (k *SimulatedKubelet) runningUID(host string) (types.UID, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	uid, ok := k.running[host]
	return uid, ok
}

// start makes h's namespace and link, its resolv.conf, and its server.
func (k *SimulatedKubelet) start(ctx context.Context, h topology.Host) error {
	if err := k.net.AddHost(ctx, h); err != nil {
		return err
	}
	return k.runner.StartServer(ctx, h)
}

// stop ends a pod's server and removes its namespace (its links and routes
// go with it) and files. Nothing there is no error.
func (k *SimulatedKubelet) stop(host string) error {
	k.mu.Lock()
	delete(k.running, host)
	delete(k.addrs, host)
	k.mu.Unlock()
	if err := k.runner.StopServer(host); err != nil {
		return err
	}
	return k.net.RemoveHost(host)
}

// registerNode creates the Node object (or finds it) and reports it Ready
// with the node's address.
func (k *SimulatedKubelet) registerNode(ctx context.Context) error {
	nodes := k.client.CoreV1().Nodes()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.node, Labels: map[string]string{
		"kubernetes.io/hostname": k.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
	}}}
	if _, err := nodes.Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", k.node, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := nodes.Get(ctx, k.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		node := k.net.Plan().Node
		cur.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: node.Addr.String()}}
		if node.Addr6.IsValid() {
			cur.Status.Addresses = append(cur.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: node.Addr6.String()})
		}
		cur.Status.Addresses = append(cur.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: k.node})
		cur.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "svclab plays the kubelet", LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		cur.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "svclab", OperatingSystem: "linux", Architecture: "amd64"}
		_, err = nodes.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}
