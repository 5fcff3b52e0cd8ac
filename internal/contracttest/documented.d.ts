/**
 * Responses app-lb documents (shared/reference/app-lb.md) and its clients
 * decode, but shared/contract/hws/dist/types.d.ts does not declare. Written
 * in the contract's own style and checked by the same rules: no undeclared
 * key, no null where none is declared, numbers where numbers are declared.
 * Timestamps are unix seconds, as everywhere in the contract.
 */

/** `GET /images` (app-lb.md §2.5, "Images inventory"). */
export interface ImageInventory {
    generated_at: number;
    complete: boolean;
    delete_supported: boolean;
    offload: boolean;
    disk_used_pct: number;
    pressure_pct: number;
    local_bytes: number;
    images: ImageView[];
}
/** One image of the inventory; `GET`/`PATCH /images/:name` answer it too. */
export interface ImageView {
    name: string;
    source: string;
    tier: string;
    digest: string;
    store: string;
    ref: string;
    bytes: number;
    last_used: number;
    pinned: boolean;
    present: boolean;
    references: ImageReference[];
}
export interface ImageReference {
    kind: string;
    id: string;
}
