// Copyright 2022 The Chromium Authors
// Use of this source code is governed by a BSD-style license that can be
// found in the LICENSE file.
export * as Configuration from './Configuration.js';
export * as Extensions from './Extensions.js';
export * as File from './File.js';
export * as Overlays from './Overlays.js';
export * as Timing from './Timing.js';
export * as Events from './TraceEvents.js';
//# sourceMappingURL=types.js.map