// Package web is `svclab web`: one page that shows the running lab live.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary (no
// build step, no framework). A poller reads the lab once a second through
// the same readers the text commands use (lab.Lab's Hosts, Services,
// TraceReport) and turns two polls into a sample of the timeline: new
// connections per second through userspace and through the kernel, and
// every change of a port's path (a hybrid promotion or demotion). Each new
// state goes to the page as a server-sent event: the data flows one way,
// is text (JSON), and the browser's EventSource reconnects by itself when
// the lab or the server restarts, which is all the page needs; a WebSocket
// would add a second direction nobody uses.
//
// A trace (TraceReport, asked for by the page) is drawn as the packet's
// way: on a picture of the lab's hosts and links, and step by step with
// its addresses after each rewrite, the replies and conntrack's entries
// (views.PacketPath); static/packet.js draws it.
//
// The controls run svclab itself (svclab traffic, svclab pod, svclab
// mode) and show the command line they ran, so that the page teaches the
// commands a tutorial types by hand. They run one at a time, in the order
// sent: a command that changes the lab while another runs (a mode switch
// restarts svcproxy while a pod change waits for it) would fail falsely.
package web
