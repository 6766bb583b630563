package swarmworker

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// proxy forwards TCP connections to the API server once opened; until then, and after close,
// its port refuses them: an API server that stops answering, as a network failure looks.
type proxy struct {
	upstream string
	address  string
	mu       sync.Mutex
	listener net.Listener
	conns    []net.Conn
}

// newProxy is a closed proxy in front of c and a client that goes through it.
func newProxy(t *testing.T, c *cluster) (*proxy, kubernetes.Interface) {
	t.Helper()
	server, err := url.Parse(c.config.Host)
	if err != nil {
		t.Fatal(err)
	}
	upstream := server.Host
	if server.Port() == "" {
		upstream = net.JoinHostPort(server.Hostname(), map[string]string{"https": "443", "http": "80"}[server.Scheme])
	}
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{upstream: upstream, address: probe.Addr().String()}
	probe.Close()
	t.Cleanup(p.close)
	config := rest.CopyConfig(c.config)
	config.Host = server.Scheme + "://" + p.address
	if config.TLSClientConfig.ServerName == "" {
		// The certificate names the API server, not the proxy.
		config.TLSClientConfig.ServerName = server.Hostname()
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return p, client
}

func (p *proxy) open(t *testing.T) {
	t.Helper()
	listener, err := net.Listen("tcp", p.address)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.listener = listener
	p.mu.Unlock()
	go p.accept(listener)
}

// close refuses new connections and breaks the open ones.
func (p *proxy) close() {
	p.mu.Lock()
	if p.listener != nil {
		p.listener.Close()
		p.listener = nil
	}
	p.mu.Unlock()
	p.drop()
}

// drop breaks every open connection.
func (p *proxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conn := range p.conns {
		conn.Close()
	}
	p.conns = nil
}

func (p *proxy) accept(listener net.Listener) {
	for {
		downstream, err := listener.Accept()
		if err != nil {
			return
		}
		upstream, err := net.Dial("tcp", p.upstream)
		if err != nil {
			downstream.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, downstream, upstream)
		p.mu.Unlock()
		go pipe(downstream, upstream)
		go pipe(upstream, downstream)
	}
}

func pipe(from, to net.Conn) {
	_, _ = io.Copy(to, from)
	from.Close()
	to.Close()
}

// refuser answers the requests of one verb on one resource with a status of its own once on,
// as RBAC or an admission policy in front of the API server would; every other request goes
// through.
type refuser struct {
	verb, resource string
	status         metav1.Status
	on             atomic.Bool
	next           http.RoundTripper
}

// newRefuser is an idle refuser of verb on resource in front of c, and a client through it.
func newRefuser(t *testing.T, c *cluster, verb, resource string, status metav1.Status) (*refuser, kubernetes.Interface) {
	t.Helper()
	r := &refuser{verb: verb, resource: resource, status: status}
	config := rest.CopyConfig(c.config)
	config.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
		r.next = next
		return r
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return r, client
}

func (r *refuser) RoundTrip(request *http.Request) (*http.Response, error) {
	if verb, resource := requestOf(request); !r.on.Load() || verb != r.verb || resource != r.resource {
		return r.next.RoundTrip(request)
	}
	status := r.status
	status.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	status.Status = metav1.StatusFailure
	body, err := json.Marshal(&status)
	if err != nil {
		return nil, err
	}
	if request.Body != nil {
		request.Body.Close()
	}
	return &http.Response{
		StatusCode: int(status.Code), Status: http.StatusText(int(status.Code)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: request,
	}, nil
}
