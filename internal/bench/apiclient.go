package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// apiToken is the bootstrap admin token the bench starts the api with.
const apiToken = "bench-token"

// apiClient talks to the api process over keep-alive connections.
type apiClient struct {
	base string
	http *http.Client
}

func newAPIClient(base string, conns int) *apiClient {
	tr := &http.Transport{
		MaxIdleConns:        2 * conns,
		MaxIdleConnsPerHost: 2 * conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &apiClient{base: base, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// do sends a JSON body and decodes a JSON answer into out (when not nil),
// returning the status.
func (a *apiClient) do(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// createClass creates a traffic class from its JSON fields.
func (a *apiClient) createClass(ctx context.Context, class map[string]any) error {
	b, err := json.Marshal(class)
	if err != nil {
		return fmt.Errorf("encode class: %w", err)
	}
	_, err = a.do(ctx, http.MethodPost, "/v1/traffic-classes", b, nil)
	return err
}

// postMessage posts a prepared message body and returns the message id and
// how many deliveries it got.
func (a *apiClient) postMessage(ctx context.Context, body []byte) (string, int, error) {
	var m struct {
		ID         string            `json:"id"`
		Deliveries []json.RawMessage `json:"deliveries"`
	}
	if _, err := a.do(ctx, http.MethodPost, "/v1/messages", body, &m); err != nil {
		return "", 0, err
	}
	return m.ID, len(m.Deliveries), nil
}

// tenantSet is a set of tenants of one endpoint group, each with the same
// number of endpoints, all under one traffic class ("" means auto).
type tenantSet struct {
	group     int
	name      string // tenant ids are <name>-<n>
	tenants   int
	perTenant int
	class     string
}

// tenantID returns the id of tenant n of the set.
func (s tenantSet) tenantID(n int) string { return s.name + "-" + strconv.Itoa(n) }

// endpoint is one registered endpoint.
type endpoint struct {
	id, tenant, path string
	group            int
}

// registerEndpoints creates every endpoint of sets through the api, with
// conns requests at a time, pointing endpoint i of tenant t of group g at
// the receiver's endpointPath(g, t, i).
func registerEndpoints(ctx context.Context, api *apiClient, rcv *receiver, secret string, conns int, sets ...tenantSet) ([]endpoint, error) {
	var all []endpoint
	for _, s := range sets {
		for t := range s.tenants {
			for i := range s.perTenant {
				all = append(all, endpoint{tenant: s.tenantID(t), path: endpointPath(s.group, t, i), group: s.group})
			}
		}
	}
	classOf := map[int]string{}
	for _, s := range sets {
		classOf[s.group] = s.class
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conns)
	for i := range all {
		g.Go(func() error {
			e := &all[i]
			body := map[string]any{"tenant_id": e.tenant, "url": rcv.url(e.path), "secret": secret}
			if c := classOf[e.group]; c != "" {
				body["traffic_class"] = c
			}
			b, err := json.Marshal(body)
			if err != nil {
				return fmt.Errorf("encode endpoint: %w", err)
			}
			var out struct {
				ID string `json:"id"`
			}
			if _, err := api.do(gctx, http.MethodPost, "/v1/endpoints", b, &out); err != nil {
				return fmt.Errorf("register endpoint: %w", err)
			}
			e.id = out.ID
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return all, nil
}
