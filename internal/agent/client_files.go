package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
)

// post sends req as JSON to path and decodes the answer into out.
func (c *Client) post(ctx context.Context, path string, req, out any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("agent: encoding %s request: %w", path, err)
	}
	return c.do(ctx, "POST", path, nil, bytes.NewReader(b), out)
}

// postFor posts req to path and decodes the answer as a T.
func postFor[T any](ctx context.Context, c *Client, path string, req any) (T, error) {
	var res T
	err := c.post(ctx, path, req, &res)
	return res, err
}

// ReadText returns a window of lines of a UTF-8 text file, with the
// file's line count and SHA-256. A binary file is an *Error with Status
// 415; one over MaxTextFile, 413.
func (c *Client) ReadText(ctx context.Context, req ReadTextRequest) (ReadTextResult, error) {
	return postFor[ReadTextResult](ctx, c, "/v1/files/read", req)
}

// ReadBytes returns up to limit bytes (all when limit < 0) of the file at
// path from offset, and the hex SHA-256 of the whole file ("" when it is
// not a regular file).
func (c *Client) ReadBytes(ctx context.Context, path string, offset, limit int64) ([]byte, string, error) {
	q := url.Values{"path": {path}}
	if offset > 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	if limit >= 0 {
		q.Set("limit", strconv.FormatInt(limit, 10))
	}
	resp, err := c.send(ctx, "GET", "/v1/files", q, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", fmt.Errorf("agent: reading %s: %w", path, err)
	}
	return b, resp.Header.Get(HeaderSHA256), nil
}

// Write atomically replaces (or creates) a file with content given in the
// request, optionally only if it still has req.ExpectedSHA256 (else an
// *Error with Status 412). The Client sends the content base64-encoded,
// so any bytes are exact; req.Encoding is ignored.
func (c *Client) Write(ctx context.Context, req WriteRequest) (WriteResult, error) {
	req.Encoding = EncodingBase64
	req.Content = base64.StdEncoding.EncodeToString([]byte(req.Content))
	return postFor[WriteResult](ctx, c, "/v1/files/write", req)
}

// Glob returns the files whose paths relative to req.Path match
// req.Pattern, newest first.
func (c *Client) Glob(ctx context.Context, req GlobRequest) (GlobResult, error) {
	return postFor[GlobResult](ctx, c, "/v1/files/glob", req)
}

// Grep returns the lines matching a regular expression in the files
// beneath req.Path.
func (c *Client) Grep(ctx context.Context, req GrepRequest) (GrepResult, error) {
	return postFor[GrepResult](ctx, c, "/v1/files/grep", req)
}

// Edit applies exact-string replacements to a file, all or none. An edit
// that matches nothing, or more than once without ReplaceAll, is an
// *Error with Status 409 naming it; a failed ExpectedSHA256, 412.
func (c *Client) Edit(ctx context.Context, req EditRequest) (EditResult, error) {
	return postFor[EditResult](ctx, c, "/v1/files/edit", req)
}

// Patch applies a multi-file unified diff, all or nothing. A hunk that
// does not apply is an *Error with Status 409 naming the file and hunk.
func (c *Client) Patch(ctx context.Context, req PatchRequest) (PatchResult, error) {
	return postFor[PatchResult](ctx, c, "/v1/files/patch", req)
}
