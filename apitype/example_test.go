package apitype_test

import (
	"encoding/json"
	"fmt"

	"github.com/berth-dev/berth/apitype"
)

// Decoding a spec keeps what berth does not know in Extra, so writing it back
// loses nothing.
func Example() {
	in := `{
		"id": "web",
		"routes": [{"host": "web.example.com"}],
		"vm": {"driver": "firecracker", "port": 8080},
		"scaling": {"min_replicas": 0},
		"auth": {"provider": "google", "public_paths": ["/healthz"]},
		"ingress": {"cloud": true}
	}`
	var spec apitype.DeploymentSpec
	if err := json.Unmarshal([]byte(in), &spec); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(spec.ID, spec.VM.Driver, spec.VM.Port)
	fmt.Println("min replicas set:", spec.Scaling.MinReplicas != nil, *spec.Scaling.MinReplicas)
	fmt.Println("google:", spec.Auth.Provider.Has(apitype.ProviderGoogle))
	fmt.Println("public path:", spec.Auth.PublicPaths[0].Path, spec.Auth.PublicPaths[0].Scope)
	fmt.Println("unknown:", string(spec.Extra["ingress"]))

	out, _ := json.Marshal(spec)
	fmt.Println(string(out))
	// Output:
	// web firecracker 8080
	// min replicas set: true 0
	// google: true
	// public path: /healthz admin
	// unknown: {"cloud": true}
	// {"id":"web","routes":[{"host":"web.example.com"}],"vm":{"driver":"firecracker","port":8080},"scaling":{"min_replicas":0},"auth":{"provider":"google","public_paths":[{"path":"/healthz","scope":"admin"}]},"ingress":{"cloud":true}}
}
