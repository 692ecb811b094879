package pods

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// Answer is what a pod says to every request: who it is and where the client
// came from, as the pod saw it. Whether that is the client's own address or
// the node's tells the student whether the proxy kept the source address.
type Answer struct {
	Pod  string
	From string // ip:port
}

// answerSep separates the pod's name from the client's address in an answer.
const answerSep = ": you came from "

func (a Answer) String() string { return a.Pod + answerSep + a.From }

// ParseAnswer reads an answer line as Answer.String writes it.
func ParseAnswer(s string) (Answer, error) {
	pod, from, ok := strings.Cut(strings.TrimSpace(s), answerSep)
	if !ok || pod == "" || strings.ContainsAny(pod, " \t") {
		return Answer{}, fmt.Errorf("answer %q: want %q", s, "POD"+answerSep+"IP:PORT")
	}
	if _, _, err := net.SplitHostPort(from); err != nil {
		return Answer{}, fmt.Errorf("answer %q: client address: %w", s, err)
	}
	return Answer{Pod: pod, From: from}, nil
}

// Pod is the server of a lab pod: HTTP on its TCP ports, and on its UDP ports
// one answer datagram per datagram received.
type Pod struct {
	Name     string
	TCP, UDP []uint16
	// Host is the address to listen on; "" is every address.
	Host string
	// Ready, if not nil, is called once every port is bound.
	Ready func()
}

// Serve listens on every port and answers until ctx ends.
func (p *Pod) Serve(ctx context.Context) error {
	var lns []net.Listener
	var pcs []net.PacketConn
	closeAll := func() {
		for _, l := range lns {
			l.Close()
		}
		for _, c := range pcs {
			c.Close()
		}
	}
	var lc net.ListenConfig
	for _, port := range p.TCP {
		l, err := lc.Listen(ctx, "tcp", net.JoinHostPort(p.Host, strconv.Itoa(int(port))))
		if err != nil {
			closeAll()
			return fmt.Errorf("pod %s: tcp port %d: %w", p.Name, port, err)
		}
		lns = append(lns, l)
	}
	for _, port := range p.UDP {
		c, err := lc.ListenPacket(ctx, "udp", net.JoinHostPort(p.Host, strconv.Itoa(int(port))))
		if err != nil {
			closeAll()
			return fmt.Errorf("pod %s: udp port %d: %w", p.Name, port, err)
		}
		pcs = append(pcs, c)
	}
	if p.Ready != nil {
		p.Ready()
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	g, ctx := errgroup.WithContext(ctx)
	for _, l := range lns {
		g.Go(func() error { return serveHTTP(srv, l) })
	}
	for _, c := range pcs {
		g.Go(func() error { return p.serveUDP(c) })
	}
	g.Go(func() error {
		<-ctx.Done()
		// Requests are a line each: closing at once loses nothing worth waiting for.
		srv.Close()
		for _, c := range pcs {
			c.Close()
		}
		return nil
	})
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// serveHTTP is the accept loop of one TCP port.
func serveHTTP(srv *http.Server, l net.Listener) error {
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ServeHTTP answers any request with the pod's Answer.
func (p *Pod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, Answer{Pod: p.Name, From: r.RemoteAddr}.String()+"\n")
}

// serveUDP is the read loop of one UDP port: each datagram gets one answer.
func (p *Pod) serveUDP(c net.PacketConn) error {
	buf := make([]byte, 2048)
	for {
		_, from, err := c.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("pod %s: udp: %w", p.Name, err)
		}
		// A client that went away is no reason to stop answering others.
		_, _ = c.WriteTo([]byte(Answer{Pod: p.Name, From: from.String()}.String()+"\n"), from)
	}
}
