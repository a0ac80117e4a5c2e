// Placement is an example extension of kaddons that serves the Render hook: it puts a
// platform's node selector and tolerations on the pod template of every workload
// (Deployment, DaemonSet, StatefulSet, Job, and CronJob's job template) of the add-ons
// its AddonExtension selects, so that no package needs forking for them.
//
// Its settings file, YAML or JSON, says what it adds:
//
//	nodeSelector:
//	  platform.example.com/pool: system
//	tolerations:
//	- key: platform.example.com/dedicated
//	  operator: Exists
//	  effect: NoSchedule
//
// Node selector keys are merged into the template's (the settings win on a key both
// have); each toleration is appended unless an equal one is there. Every object comes
// back, the ones without a pod template unchanged; none is added or removed. The file is
// read again when it changes, and the revision discovery reports changes with it, so
// kaddons renders the add-ons again.
//
// See examples/extensions/README.md for the flags and how to register it, and
// docs/extensions.md for the contract.
package main

import (
	"context"
	"log/slog"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	"github.com/kaddons/kaddons/examples/extensions/internal/server"
)

func main() {
	server.Main("placement", "adds a platform's node selector and tolerations to every workload of the add-ons (Render)",
		ParseSettings, handlers)
}

// handlers are the hooks placement serves: Render.
func handlers(settings *server.Settings[Settings], log *slog.Logger) server.Handlers {
	return server.Handlers{Render: func(_ context.Context, req *hooksv1alpha1.RenderRequest) (*hooksv1alpha1.RenderResponse, error) {
		s, revision, err := settings.Get()
		if err != nil {
			return nil, err
		}
		objects, changed, err := s.Place(req.Objects)
		if err != nil {
			return nil, err
		}
		log.Info("rendered", "addon", req.Addon.Kind+" "+req.Addon.Namespace+"/"+req.Addon.Name, "version", req.Version,
			"objects", len(objects), "changed", changed, "revision", revision)
		return &hooksv1alpha1.RenderResponse{Objects: objects}, nil
	}}
}
