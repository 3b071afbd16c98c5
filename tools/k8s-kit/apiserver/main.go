// Command kitapi is the API server of tools/k8s-kit: upstream apiextensions-apiserver (Debian's Go
// sources, plus the two small fixes in patches/) with a few HTTP filters around it, so that kubectl,
// helm and kube-rs can use it like a cluster. What the filters do (see README.md):
//
//   - routes.go: GET /api, /api/v1/... (served by CRDs of the core group ""), GET /apis listing
//     every CRD group, none of which the standalone apiextensions server has;
//   - bodies.go: protobuf request bodies re-encoded as JSON, and strategic merge patches on
//     built-in kinds turned into JSON merge patches.
//
// Everything else (CRDs, validation, CEL, defaulting, server-side apply, watch) is upstream code.
package main

import (
	"context"
	"net/http"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/openapi"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/component-base/cli"
)

func main() {
	os.Exit(cli.Run(command(genericapiserver.SetupSignalContext())))
}

// command mirrors upstream's server.NewServerCommand, with run in place of its Run.
func command(ctx context.Context) *cobra.Command {
	opts := options.NewCustomResourceDefinitionsServerOptions(os.Stdout, os.Stderr)
	cmd := &cobra.Command{
		Use:   "kitapi",
		Short: "apiextensions-apiserver that passes for a small Kubernetes API server (tools/k8s-kit)",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return opts.ServerRunOptions.ComponentGlobalsRegistry.Set()
		},
		RunE: func(c *cobra.Command, _ []string) error {
			if err := opts.Complete(); err != nil {
				return err
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			return run(c.Context(), opts)
		},
	}
	cmd.SetContext(ctx)
	opts.AddFlags(cmd.Flags())
	return cmd
}

func run(ctx context.Context, opts *options.CustomResourceDefinitionsServerOptions) error {
	config, err := opts.Config()
	if err != nil {
		return err
	}
	generic := config.GenericConfig
	// Upstream serves only /openapi/v3; with a v2 config too, its CRD OpenAPI v2 controller runs and
	// kubectl's client-side validation finds the CRD schemas.
	generic.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(
		openapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(generatedopenapi.GetOpenAPIDefinitions),
		openapinamer.NewDefinitionNamer(apiserver.Scheme, scheme.Scheme))
	generic.BuildHandlerChainFunc = func(api http.Handler, c *genericapiserver.Config) http.Handler {
		// Body filters run after authentication and request-info resolution (they need both);
		// the path routes run first, so that /api/v1/... resolves as the CRD group "".
		return coreRoutes(genericapiserver.DefaultBuildHandlerChain(protobufAsJSON(strategicAsMerge(api)), c))
	}
	server, err := config.Complete().New(genericapiserver.NewEmptyDelegate())
	if err != nil {
		return err
	}
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
