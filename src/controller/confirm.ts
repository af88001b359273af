// ValidateVolumeCapabilities' positive answer: the spec has the plugin echo back what it confirmed.
import type { ValidateVolumeCapabilitiesRequest, ValidateVolumeCapabilitiesResponse } from '../csi/types.js';

/** Everything the request asked about, confirmed. */
export function confirmed(req: ValidateVolumeCapabilitiesRequest): ValidateVolumeCapabilitiesResponse {
  return {
    confirmed: {
      volumeContext: req.volumeContext,
      volumeCapabilities: req.volumeCapabilities,
      parameters: req.parameters,
      mutableParameters: req.mutableParameters,
    },
  };
}
