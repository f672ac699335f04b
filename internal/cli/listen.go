package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
)

// maxWebhookBody bounds a forwarded webhook's body, as a receiver would.
const maxWebhookBody = 8 << 20

// hopHeaders are not forwarded: they describe one connection, not the
// webhook.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
}

// forwarded is what listen prints of each webhook.
type forwarded struct {
	At        time.Time `json:"at"`
	WebhookID string    `json:"webhook_id"`
	Bytes     int       `json:"bytes"`
	// Status is the forward target's answer (what hookd gets back), or
	// 200 without --forward.
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
}

// listener receives a tenant's webhooks on this machine through a
// temporary endpoint and forwards each to a local URL.
type listener struct {
	forward *url.URL // nil: print and answer 200
	client  *http.Client
	now     func() time.Time
	report  func(forwarded) error
}

func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	rec := forwarded{At: l.now().UTC(), WebhookID: r.Header.Get("Webhook-Id"), Bytes: len(body), Status: http.StatusOK}
	status, answer := http.StatusOK, []byte{}
	if l.forward != nil {
		status, answer, err = l.send(r, body)
		rec.Status = status
		if err != nil {
			rec.Error = err.Error()
		}
	}
	_ = l.report(rec)
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// send forwards the webhook as received: method, headers (its signature
// among them) and body, and returns the target's answer. An unreachable
// target answers 502, so hookd retries it.
func (l *listener) send(r *http.Request, body []byte) (int, []byte, error) {
	target := *l.forward
	if r.URL.RawQuery != "" {
		target.RawQuery = r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, target.String(), bytes.NewReader(body))
	if err != nil {
		return http.StatusBadGateway, nil, fmt.Errorf("forward: %w", err)
	}
	for k, vs := range r.Header {
		if !hopHeaders[k] {
			req.Header[k] = vs
		}
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return http.StatusBadGateway, nil, fmt.Errorf("forward: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, answer, nil
}

func (a *app) listenCommand() *cobra.Command {
	var tenant, forward, addr, publicURL, secret string
	var eventTypes []string
	c := &cobra.Command{
		Use:   "listen --tenant TENANT [--forward URL]",
		Short: "Receive a tenant's webhooks on this machine through a temporary endpoint",
		Long: `listen starts a receiver on --addr, registers a temporary endpoint of the
tenant pointed at it (at --url when hookd reaches this machine through a
tunnel), forwards each webhook with its headers and signature to
--forward and answers hookd with what the forward target answered, and
prints each one. The endpoint's signing secret is printed at the start
(or give your own with --secret). On interrupt the endpoint is deleted.`,
		Example: "  hookd listen --tenant acme --forward http://127.0.0.1:3000/hooks",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" {
				return usagef("listen needs --tenant")
			}
			l := &listener{client: &http.Client{Timeout: 30 * time.Second}, now: a.env.Now}
			if forward != "" {
				u, err := url.Parse(forward)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return usagef("--forward %q is not an http(s) URL", forward)
				}
				l.forward = u
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			p := a.printer()
			l.report = func(f forwarded) error {
				if p.json {
					return p.writeJSONLine(f)
				}
				line := fmt.Sprintf("%s  %s  %d bytes  -> %d", fmtTime(f.At), f.WebhookID, f.Bytes, f.Status)
				if f.Error != "" {
					line += "  " + f.Error
				}
				_, err := fmt.Fprintln(p.out, line)
				return err
			}
			return a.listen(cmd.Context(), client, l, listenOptions{tenant: tenant, addr: addr, publicURL: publicURL, secret: secret, eventTypes: eventTypes})
		},
	}
	c.Flags().StringVar(&tenant, "tenant", "", "the tenant whose webhooks to receive")
	c.Flags().StringVar(&forward, "forward", "", "the local URL each webhook is forwarded to (default: print and answer 200)")
	c.Flags().StringSliceVar(&eventTypes, "event-type", nil, "only these event types (or prefix.*); repeat for more")
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "where the receiver listens")
	c.Flags().StringVar(&publicURL, "url", "", "the URL hookd reaches the receiver at (default: http://ADDR/)")
	c.Flags().StringVar(&secret, "secret", "", "the temporary endpoint's whsec_ secret (default: generated and printed)")
	return c
}

type listenOptions struct {
	tenant, addr, publicURL, secret string
	eventTypes                      []string
}

func (a *app) listen(ctx context.Context, client *hookd.Client, l *listener, o listenOptions) error {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.addr, err)
	}
	srv := &http.Server{Handler: l, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-served
	}()

	target := o.publicURL
	if target == "" {
		target = "http://" + ln.Addr().String() + "/"
	}
	req := hookd.CreateEndpointRequest{
		TenantID: o.tenant, URL: &target, Description: hookd.Ptr("hookd listen (temporary)"),
		Secret: optString(o.secret),
	}
	if len(o.eventTypes) > 0 {
		req.EventTypes = &o.eventTypes
	}
	ep, err := client.Endpoints.Create(ctx, req)
	if err != nil {
		return err
	}
	// The endpoint is deleted however the run ends: with a context of its
	// own, as the run's is cancelled by then.
	defer func() {
		delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if err := client.Endpoints.Delete(delCtx, ep.ID); err != nil {
			fmt.Fprintf(a.env.Stderr, "hookd: delete the temporary endpoint %s: %v\n", ep.ID, err)
			return
		}
		fmt.Fprintf(a.env.Stderr, "Deleted the temporary endpoint %s.\n", ep.ID)
	}()
	secret := o.secret
	if secret == "" {
		s, err := client.Endpoints.Secret(ctx, ep.ID)
		if err != nil {
			return err
		}
		raw, _ := s.Secret.MarshalJSON()
		secret = strings.Trim(string(raw), `"`)
	}
	dest := "printed only"
	if l.forward != nil {
		dest = "forwarded to " + l.forward.String()
	}
	fmt.Fprintf(a.env.Stderr, "Listening on %s for %s's webhooks through the temporary endpoint %s, %s.\nSigning secret: %s\nPress Ctrl-C to stop.\n",
		ln.Addr(), o.tenant, ep.ID, dest, secret)

	select {
	case <-ctx.Done():
		return nil
	case err := <-served:
		served <- err // for the deferred shutdown
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("receiver: %w", err)
	}
}
