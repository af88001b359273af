// The volume id of a CreateVolume answer, for a test that goes on to use it: a missing one fails
// the test there, naming what was missing.
import type * as T from '../../src/csi/types.js';
import { present } from './present.js';

export async function createdId(answer: Promise<T.CreateVolumeResponse>): Promise<string> {
  return present((await answer).volume?.volumeId, 'CreateVolume: volume id');
}
