package admin

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/notify"
	"github.com/berth-dev/berth/internal/web"
)

// The security alert webhooks (berth's own, operator only): see package
// notify.

func (a *API) webhooks() (*notify.Notifier, error) {
	if a.o.Webhooks == nil {
		return nil, web.Errorf(http.StatusServiceUnavailable, "security alert webhooks are not enabled on this server")
	}
	return a.o.Webhooks, nil
}

// webhookError maps package notify's errors onto the envelope.
func webhookError(err error, id string) error {
	var fe *web.FieldError
	switch {
	case errors.As(err, &fe):
		return web.Invalid(fe.Field, "%s", fe.Msg)
	case errors.Is(err, notify.ErrNotFound):
		return &web.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no webhook %q", id), Err: err}
	case errors.Is(err, notify.ErrQueueFull):
		return &web.Error{Status: http.StatusServiceUnavailable, Message: "the webhook's queue is full: its receiver is not keeping up; try again later", Err: err}
	case errors.Is(err, notify.ErrClosed):
		return &web.Error{Status: http.StatusServiceUnavailable, Message: "the webhooks are shutting down", Err: err}
	default:
		return &web.Error{Status: http.StatusInternalServerError, Message: "the webhook was not saved", Err: err}
	}
}

// listWebhooks is GET /security/webhooks: every webhook, oldest first,
// without secrets.
func (a *API) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	n, err := a.webhooks()
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, n.List())
	return nil
}

// postWebhook is POST /security/webhooks: 201 with the webhook, its secret
// shown this once. The body is closed: an unknown key is refused.
func (a *API) postWebhook(w http.ResponseWriter, r *http.Request) error {
	n, err := a.webhooks()
	if err != nil {
		return err
	}
	raw, err := web.ReadBody(w, r)
	if err != nil {
		return err
	}
	if p := apitype.UnknownKey(raw, reflect.TypeFor[apitype.WebhookSpec]()); p != "" {
		if p == "secret" {
			return web.Invalid(p, "not a field of a webhook: berth generates the signing secret and returns it once, in this reply")
		}
		return web.Invalid(p, "not a field of a webhook")
	}
	var spec apitype.WebhookSpec
	if err := web.DecodeJSON(raw, &spec); err != nil {
		return err
	}
	v, err := n.Add(r.Context(), spec)
	if err != nil {
		return webhookError(err, "")
	}
	web.WriteJSON(w, http.StatusCreated, v)
	return nil
}

// deleteWebhook is DELETE /security/webhooks/{id}: 204, alerts still queued
// for it dropped.
func (a *API) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	n, err := a.webhooks()
	if err != nil {
		return err
	}
	if err := n.Delete(r.Context(), r.PathValue("id")); err != nil {
		return webhookError(err, r.PathValue("id"))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// testWebhook is POST /security/webhooks/{id}/test: 202, a synthetic info
// alert queued for the webhook whatever its min_severity; the outcome shows
// in its counts.
func (a *API) testWebhook(w http.ResponseWriter, r *http.Request) error {
	n, err := a.webhooks()
	if err != nil {
		return err
	}
	id, err := n.Test(r.PathValue("id"))
	if err != nil {
		return webhookError(err, r.PathValue("id"))
	}
	web.WriteJSON(w, http.StatusAccepted, apitype.WebhookTest{Delivery: id})
	return nil
}
